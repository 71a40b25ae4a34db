"""web/download.mjs stallWatch (run in node): a download's stall timer counts only the time its
worker could run. Time the thread spent blocked (Python parsing a header, a loaded machine) is not
a stalled network: a plain setTimeout(stallMs) fires at once after such a block, before the bytes
that came meanwhile are read (a false "no data for 30 s")."""
from __future__ import annotations

from tests.test_catalogue import node

WATCH = """
import { stallWatch } from './web/download.mjs';
const ms = 200;
let fired = 0;
const w = stallWatch(ms, () => { fired++; });
const block = (t) => { const end = Date.now() + t; while (Date.now() < end); };
block(1000);                                     // 5x the limit with the thread busy
const tick = () => new Promise((r) => setTimeout(r, 0));
await tick();                                    // (the watch's overdue tick runs first)
const afterBlock = fired;
let kicked = 0;
for (let i = 0; i < 6; i++) { await new Promise((r) => setTimeout(r, 40)); w.kick(); kicked += fired; }
const t0 = Date.now();
while (!fired && Date.now() - t0 < 20000) await new Promise((r) => setTimeout(r, 10));
w.stop();
console.log(JSON.stringify({ afterBlock, kicked, fired, waited: Date.now() - t0 }));
"""


def test_stall_watch_ignores_a_blocked_thread_and_fires_when_left_alone():
    r = node(WATCH, None)
    assert r["afterBlock"] == 0, r          # a blocked thread is not a stall
    assert r["kicked"] == 0, r              # bytes (kicks) keep it quiet
    assert r["fired"] == 1 and r["waited"] < 20000, r   # silence of the thread's own time: it fires, once
