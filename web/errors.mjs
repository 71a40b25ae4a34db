// The library's errors (web/bitweb.mjs exports them): BitwebError with a `kind` (README, "Errors"),
// one subclass per kind, and the helpers the library's modules throw them with.

/** Every error kind this library reports (README, "Errors"). */
export const ERROR_KINDS = Object.freeze([
  'no-webgpu', 'limits', 'format', 'unsupported', 'download', 'cors', 'storage', 'device-lost',
  'out-of-memory', 'no-room', 'context', 'settings', 'aborted', 'unloaded', 'busy', 'gpu', 'internal',
]);

export class BitwebError extends Error {
  /** @param {string} kind @param {string} message @param {object} [extra] */
  constructor(kind, message, extra = {}) {
    super(message);
    this.name = 'BitwebError';
    this.kind = kind;
    Object.assign(this, extra);
  }
}
const CLASS_NAMES = {
  'no-webgpu': 'NoWebGPUError', limits: 'LimitsError', format: 'FormatError', unsupported: 'UnsupportedError',
  download: 'DownloadError', cors: 'CorsError', storage: 'StorageError', 'device-lost': 'DeviceLostError',
  'out-of-memory': 'OutOfMemoryError', 'no-room': 'NoRoomError', context: 'ContextError', settings: 'SettingsError',
  aborted: 'AbortedError', unloaded: 'UnloadedError', busy: 'BusyError', gpu: 'GPUError', internal: 'InternalError',
};
/** One Error subclass per kind: `errors.context`, `errors['no-webgpu']` ... (all extend BitwebError). */
export const errors = Object.fromEntries(ERROR_KINDS.map((kind) => {
  const cls = class extends BitwebError { constructor(message, extra) { super(kind, message, extra); this.name = CLASS_NAMES[kind]; } };
  Object.defineProperty(cls, 'name', { value: CLASS_NAMES[kind] });
  return [kind, cls];
}));
/** The error of a kind (an unknown kind: internal). */
export const error = (kind, message, extra) => new (errors[kind] || errors.internal)(message, extra);
/** A settings error naming its field. */
export const settingsError = (field, message) => error('settings', `${field}: ${message}`, { field });
