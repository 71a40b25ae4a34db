"""Allowed-token masks for a grammar over a model's vocabulary, cached per state (stdlib only).

Vocabulary: the text tokens (NORMAL and BYTE types: what token_to_bytes gives for them) in a trie,
flattened in preorder (node i's subtree is i+1 .. end[i]-1), so a walk that finds a prefix dead
skips every token under it at once. Control, unknown, unused and user-defined tokens never match
text; a GBNF token element (<[id]>, <text>) can still name one. Stop tokens (EOS, EOT ...) are
allowed exactly when the grammar accepts what was generated.

A mask is an int bitset over token ids (bit t = token t allowed); `words()` gives the n_vocab bits
as little-endian u32 words, ready to upload to a GPU buffer.

Caching (why steady-state decoding is cheap): masks are made per *frame*. A state is a set of
stacks; for a stack (rest..., D) the tokens split into
  - those consumed inside the frame of D (D's rule and what it calls): they depend on D alone and
    are cached per D, so a JSON string's inner state is walked once for every string of that rule,
    whatever object, array or property it sits in;
  - those that end D's rule part way through (`"` + `,` ...): the trie node where the frame ended
    (an *exit*) is cached with the frame, and only that subtree is walked against what follows
    (cached per (node, state)).
An iteration of a counted repetition X{m,n} (automaton.py) is such a frame too, walked once with a
relative count for every count a generation reaches. The state's mask is the OR of its stacks'
parts, cached per state: a state reached again costs one dict lookup, and the state after a token
is memoized per (state, token).

Each part is kept as {d: mask}, d being the fewest bytes that complete the grammar after the
token, so `mask(remaining=n)` can keep only the tokens that still let the output finish within n
tokens (every byte is at worst one token: true of byte-level BPE and of SentencePiece with byte
fallback). Generation that honours it ends with complete output instead of running out mid-value.
"""
from __future__ import annotations

import sys
from array import array

from bitweb.grammar.automaton import DEAD, EXIT, REL
from bitweb.grammar.gbnf import GrammarError
from bitweb.tokenizer import BYTE, NORMAL

TEXT_TYPES = (NORMAL, BYTE)   # the token types that stand for text


def bits(ids, n: int) -> int:
    """The int bitset of token ids."""
    ba = bytearray((n + 7) >> 3)
    for i in ids:
        ba[i >> 3] |= 1 << (i & 7)
    return int.from_bytes(ba, "little")


def ids_of(mask: int) -> list:
    """Token ids of an int bitset, ascending."""
    out = []
    data = mask.to_bytes((mask.bit_length() + 7) >> 3, "little")
    for k, byte in enumerate(data):
        while byte:
            low = byte & -byte
            out.append((k << 3) + low.bit_length() - 1)
            byte ^= low
    return out


def words(mask: int, n_vocab: int) -> array:
    """The n_vocab-bit mask as u32 words (word t >> 5, bit t & 31), little-endian like a GPU buffer."""
    n_words = (n_vocab + 31) >> 5
    out = array("I")
    out.frombytes(mask.to_bytes(4 * n_words, "little"))
    if sys.byteorder == "big":
        out.byteswap()
    return out


class Vocabulary:
    """A model's vocabulary as the grammar engine needs it: token bytes in a trie, stop ids, and the
    text -> id map for GBNF token elements. Build one per tokenizer and share it."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.n_vocab = n = tokenizer.n_vocab
        self.stop_ids = frozenset(tokenizer.stop_ids)
        types = tokenizer.token_types
        self.token_bytes = [b""] * n
        entries = []
        for i in range(n):
            if types[i] in TEXT_TYPES and i not in self.stop_ids:
                b = tokenizer.token_to_bytes(i)
                if b:
                    self.token_bytes[i] = b
                    entries.append((b, i))
        entries.sort()
        self.text_ids = bits((i for _, i in entries), n)
        # preorder trie: node 0 is the root (the empty prefix)
        byte, depth, end, toks = [0], [0], [0], [None]
        path = [0]                                 # node index at each depth of the current prefix
        prev = b""
        for b, i in entries:
            if b == prev and len(path) > 1:
                toks[path[-1]] = toks[path[-1]] + (i,)
                continue
            k = 0
            m = min(len(b), len(prev))
            while k < m and b[k] == prev[k]:
                k += 1
            while len(path) > k + 1:               # close the nodes past the common prefix
                end[path.pop()] = len(byte)
            for j in range(k, len(b)):
                path.append(len(byte))
                byte.append(b[j])
                depth.append(j + 1)
                end.append(0)
                toks.append(None)
            toks[path[-1]] = (i,)
            prev = b
        while path:
            end[path.pop()] = len(byte)
        self.byte, self.depth, self.end, self.toks = byte, depth, end, toks
        self.max_depth = max(depth)
        singles = {b[0] for b, _ in entries if len(b) == 1}
        # bytes valid UTF-8 can hold (C0, C1, F5-FF never occur): with all of them as tokens, any
        # text is reachable one byte at a time, which the token budget counts on
        self.single_bytes = all(v in singles for v in range(256) if v not in (0xC0, 0xC1) and v < 0xF5)

    @property
    def n_nodes(self) -> int:
        return len(self.byte)

    def resolve(self, ref) -> frozenset:
        """The ids a GBNF token element stands for: <[id]> or <text> (the token whose text is
        exactly that, as llama.cpp's parse_special tokenization finds it)."""
        if isinstance(ref, int):
            if not 0 <= ref < self.n_vocab:
                raise GrammarError(f"token <[{ref}]> is out of range (the vocabulary has {self.n_vocab} tokens)")
            return frozenset((ref,))
        tid = self.tokenizer.token_to_id.get(ref)
        if tid is None:
            raise GrammarError(f"token {ref} is not a single token of this vocabulary")
        return frozenset((tid,))


class Masks:
    """The per-frame and per-state mask caches of one automaton over one vocabulary (shared by every
    Constraint of that grammar and vocabulary)."""

    def __init__(self, automaton, vocab: Vocabulary):
        self.A, self.V = automaton, vocab
        self.n_vocab = vocab.n_vocab
        self._frames, self._subtrees, self._states, self._allowed = {}, {}, {}, {}
        self._counted, self._labels = {}, {}
        self._refs, self._advance, self._words, self._stops, self._ids = {}, {}, {}, {}, {}
        self.frame_walks = self.subtree_walks = self.nodes_walked = 0     # statistics

    def ref_ids(self, ref) -> frozenset:
        got = self._refs.get(ref)
        if got is None:
            got = self._refs[ref] = self.V.resolve(ref)
        return got

    # ------------------------------------------------------------ trie walks
    def _label(self, mode: str, s: int):
        """What reaching state s at a trie node means in a walk: (keys its token is filed under,
        exit keys, the state the walk goes on with). mode "sub": keys (d,); "frame": an ended frame
        is exit None and files the token under d 0; "count": a counted frame (relative count j):
        ("in", j, d) while an iteration is under way, ("x", j, d) once the repetition ended, exit j
        when the frame below it ended too."""
        A = self.A
        if mode == "sub":
            return (A.S_dist[s],), (), s
        cont = A.noexit(s) if A.S_exit[s] else s
        if mode == "frame":
            return ((0,), (None,), cont) if A.S_exit[s] else ((A.S_dist[s],), (), s)
        inside, ended, exited = {}, {}, set()
        ed, info = A.element_dist, A.count_info
        for st in A.S_stacks[s]:
            if len(st) == 1:                                   # the frame ended, the repetition after j
                exited.add(info[-2 - st[0]][2])
                continue
            kind, _, j = info[-2 - st[1]] if st[1] < EXIT else info[-2 - st[2]]
            dl = sum(ed(e) for e in st)
            box = inside if kind == REL else ended
            box[j] = min(dl, box.get(j, dl))
        keys = tuple(("in", j, dl) for j, dl in sorted(inside.items())) + \
            tuple(("x", j, dl) for j, dl in sorted(ended.items())) + tuple(("x", j, 0) for j in sorted(exited))
        return keys, tuple(sorted(exited)), cont

    def _walk(self, sid: int, lo: int, hi: int, mode: str):
        """Tokens at trie nodes lo..hi-1 (a whole subtree's strict descendants, the parent's state
        sid) that the automaton accepts: ({key: mask}, {exit key: [trie nodes]}), keys as _label
        files them. In a frame (mode "frame" / "count": sid's stacks sit on EXIT) a node where the
        frame ends is an exit (what follows the frame is walked separately, per context) and the walk
        goes on below it with the frame's other stacks."""
        A, V = self.A, self.V
        trans, step = A.S_trans, A.step
        labels = self._labels.setdefault(mode, {})
        byte, depth, end, toks = V.byte, V.depth, V.end, V.toks
        states = [0] * (V.max_depth + 1)
        states[depth[lo] - 1 if lo < hi else 0] = sid
        hist, exits = {}, {}
        i = lo
        visited = 0
        while i < hi:
            visited += 1
            prev = states[depth[i] - 1]
            s = trans[prev].get(byte[i])
            if s is None:
                s = step(prev, byte[i])
            if s == DEAD:
                i = end[i]
                continue
            lab = labels.get(s)
            if lab is None:
                lab = labels[s] = self._label(mode, s)
            keys, ended, s = lab
            t = toks[i]
            if t is not None:
                for k in keys:
                    hist.setdefault(k, []).extend(t)
            if ended and end[i] > i + 1:
                for k in ended:
                    exits.setdefault(k, []).append(i)
            if s == DEAD:
                i = end[i]
                continue
            states[depth[i]] = s
            i += 1
        self.nodes_walked += visited
        n = self.n_vocab
        return {k: bits(v, n) for k, v in hist.items()}, exits

    def frame(self, d: int):
        """({d_local: mask}, exits) of the frame whose top local state is d (cached)."""
        got = self._frames.get(d)
        if got is None:
            hist, exits = self._frame_walk("frame", (EXIT, d))
            got = self._frames[d] = (hist, exits.get(None, []))
        return got

    def counted_frame(self, ret: int | None, r: int, d: int):
        """({key: mask}, {j: exit nodes}) of an iteration of counted rule r at local state d, with
        the return state ret (None: none) after the repetition, for any count (keys as _label's
        "count"; cached)."""
        key = (ret, r, d)
        got = self._counted.get(key)
        if got is None:
            base = (EXIT,) if ret is None else (EXIT, ret)
            got = self._counted[key] = self._frame_walk("count", base + (self.A.count(REL, r, 0), d))
        return got

    def _frame_walk(self, mode: str, stack: tuple):
        A = self.A
        self.frame_walks += 1
        hist, exits = self._walk(A.state({stack}), 1, self.V.n_nodes, mode)
        for ref, neg, nd in A.D_toks[stack[-1]]:         # GBNF token elements: whole tokens
            ids = self.ref_ids(ref)
            m = (self.V.text_ids & ~bits(ids, self.n_vocab)) if neg else bits(ids - self.V.stop_ids, self.n_vocab)
            for k in self._label(mode, A.state(A.expand(stack[:-1] + (nd,))))[0]:
                hist[k] = hist.get(k, 0) | m
        return hist, exits

    def subtree(self, node: int, sid: int) -> dict:
        """{d: mask} of the tokens strictly below trie node `node`, entered in state sid (cached)."""
        key = (node, sid)
        got = self._subtrees.get(key)
        if got is None:
            self.subtree_walks += 1
            hist = self._walk(sid, node + 1, self.V.end[node], "sub")[0]
            got = self._subtrees[key] = hist
        return got

    def hist(self, sid: int) -> dict:
        """{d: mask} of the tokens allowed in state sid (stop tokens not included)."""
        got = self._states.get(sid)
        if got is None:
            A = self.A
            ed = A.element_dist
            got = {}

            def add(d, m):
                got[d] = got.get(d, 0) | m

            for s in A.S_stacks[sid]:
                if not s:
                    continue
                if len(s) >= 2 and s[-2] < EXIT:           # an iteration of X{m,n}: count n below it
                    _, r, n = A.count_info[-2 - s[-2]]
                    lo, hi = A.counted[r]
                    ret = s[-3] if len(s) >= 3 and s[-3] >= 0 else None     # walked with the frame
                    rest = s[:-2] if ret is None else s[:-3]
                    dr = sum(ed(e) for e in rest)
                    fh, exits = self.counted_frame(ret, r, s[-1])
                    for k, m in fh.items():
                        if k[0] == "in" and n + k[1] + 1 <= hi:
                            add(k[2] + max(0, lo - n - k[1] - 1) * A.min_len[r] + dr, m)
                        elif k[0] == "x" and lo <= n + k[1] <= hi:
                            add(k[2] + dr, m)
                    after = None
                    for j, nodes in exits.items():
                        if lo <= n + j <= hi:
                            after = after or (A.popped(rest) if rest else A.state({()}))
                            for node in nodes:
                                for dd, m in self.subtree(node, after).items():
                                    add(dd, m)
                    continue
                rest = s[:-1]
                fh, exits = self.frame(s[-1])
                dr = sum(ed(e) for e in rest)
                for dl, m in fh.items():
                    add(dl + dr, m)
                if exits:
                    after = A.popped(rest) if rest else A.state({()})
                    for node in exits:
                        for dd, m in self.subtree(node, after).items():
                            add(dd, m)
            self._states[sid] = got
        return got

    def stop_mask(self, stop_ids: frozenset) -> int:
        got = self._stops.get(stop_ids)
        if got is None:
            got = self._stops[stop_ids] = bits(stop_ids, self.n_vocab)
        return got

    def allowed(self, sid: int, remaining: int | None = None, stop_ids: frozenset = frozenset()):
        """(key, mask) of the tokens allowed in state sid; the same key means the same mask.
        remaining: tokens left to generate, this one included; when given, tokens after which the
        grammar cannot be completed in time are left out (when nothing, not even a stop token, is
        left: those that leave the least to write). Stop tokens are allowed when the state accepts."""
        h = self.hist(sid)
        accept = self.A.S_accept[sid]
        keep = None
        if remaining is not None and h and max(h) > remaining - 1:
            keep = remaining - 1
            if min(h) > keep and not (accept and stop_ids):
                keep = min(h)                   # nothing finishes in time: the least to write
        stops = stop_ids if accept else frozenset()
        key = (sid, keep, stops)
        got = self._allowed.get(key)
        if got is None:
            out = self.stop_mask(stops) if stops else 0
            for d, m in h.items():
                if keep is None or d <= keep:
                    out |= m
            got = self._allowed[key] = out
        return key, got

    def ids(self, key, mask: int) -> list:
        got = self._ids.get(key)
        if got is None:
            got = self._ids[key] = ids_of(mask)
        return got

    def words(self, key, mask: int) -> array:
        got = self._words.get(key)
        if got is None:
            got = self._words[key] = words(mask, self.n_vocab)
        return got

    def advance(self, sid: int, token: int) -> int:
        """The state after a (non-stop) token; DEAD when the grammar does not allow it."""
        key = (sid, token)
        got = self._advance.get(key)
        if got is None:
            A = self.A
            got = A.step_bytes(sid, self.V.token_bytes[token]) if self.V.token_bytes[token] else DEAD
            if A.has_tokens(sid):
                alt = A.step_token(sid, token, self.ref_ids)
                if alt != DEAD:
                    got = alt if got == DEAD else A.state(A.S_stacks[got] | A.S_stacks[alt])
            self._advance[key] = got
        return got
