// The app offline: registers the service worker (web/sw.js, which says what it keeps and how
// versions never mix) once the page's first model load has settled, so that its install (about
// 15 MB from the server on a first visit) never competes with that load. On a page without the
// app's data-state (another page of the app's origin), on the window's load event.
// Nothing here is needed for the app to work online; a browser without service workers (or a page
// that is not a secure context) just has no offline copy.
//
//   import * as offline from './offline.mjs';
//   await offline.status()   // {version, complete, pin, caches} or null (no service worker controls the page)

export const supported = 'serviceWorker' in navigator && globalThis.isSecureContext !== false;

let started = null;

/** Register the service worker now (or check it for an update); resolves to the registration or null. */
export function register() {
  if (!supported) return Promise.resolve(null);
  started ??= (async () => {
    try {
      const have = navigator.serviceWorker.controller && await navigator.serviceWorker.getRegistration();
      if (have) {                                   // (offline this update check fails: nothing to say)
        have.update().catch(() => {});
        return have;
      }
      return await navigator.serviceWorker.register(new URL('./sw.js', import.meta.url), { updateViaCache: 'none' });
    } catch (e) {
      console.warn('bitweb: no offline copy (the service worker did not register):', e);
      return null;
    }
  })();
  return started;
}

/** What the service worker controlling this page says: {version, complete (its cache holds every
 * file), pin ('network' or the version this page came from), caches}, or null. */
export async function status() {
  const sw = supported && navigator.serviceWorker.controller;
  if (!sw) return null;
  const ch = new MessageChannel();
  const answer = new Promise((resolve) => { ch.port1.onmessage = (e) => resolve(e.data); });
  sw.postMessage({ type: 'status' }, [ch.port2]);
  return answer;
}

function whenSettled(fn) {
  const settled = () => ['ready', 'failed'].includes(document.body?.dataset.state);
  if (!document.body?.dataset.state) {
    if (document.readyState === 'complete') fn(); else addEventListener('load', fn, { once: true });
    return;
  }
  if (settled()) { fn(); return; }
  const watch = new MutationObserver(() => { if (settled()) { watch.disconnect(); fn(); } });
  watch.observe(document.body, { attributes: true, attributeFilter: ['data-state'] });
}

if (supported) whenSettled(register);
