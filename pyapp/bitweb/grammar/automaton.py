"""A grammar as a byte-level pushdown automaton, determinized lazily (stdlib only).

Compile (once per grammar):
  - each rule becomes an NFA over bytes: code point classes are compiled to their UTF-8 byte
    sequences (surrogates excluded, so only valid UTF-8 is ever accepted), repetition becomes loops
    or unrolled copies, a reference to another rule a call edge (rule, return node). Rules with a
    finite language (no unbounded repetition, no recursion: `char`, `space`, a number) are inlined
    into their callers, so the rules left as call frames are the ones a token can live inside
    (strings, arrays, objects): that is what lets masks be cached per frame (bitweb.grammar.masks).
  - dist: the fewest bytes from each node to its rule's end (Knuth's generalisation of Dijkstra
    over the call graph); nodes that can never finish are pruned, a root that can't is an error.
  - left recursion (a rule reaching itself without consuming a byte) is an error, as in llama.cpp.

Run (lazily, memoized):
  - a *local state* D (an int) is a set of NFA nodes of one rule, closed under empty moves; its
    byte transitions are a DFA built on demand (`delta`).
  - a *stack* is a tuple of local states: the current one last, return states below; EXIT (-1) at
    the bottom marks a frame walked on its own (masks.py). A state's stacks all end in a local state
    that consumes bytes (calls and rule ends are expanded when a state is made); () means the root
    rule has ended: the input so far is accepted.
  - a bounded repetition X{m,n} with n >= COUNTED is not unrolled: X becomes a rule of its own, and
    a *count element* (an int <= -2, `count_info`) under X's frame holds the iterations done, so
    `char{1,100}` costs one frame whatever its length. In a frame walked on its own (masks.py:
    (EXIT, return state, REL 0, X's state)) the count is relative, from 0, so one walk serves every
    count: ending the repetition leaves an inert EXITED j under the return state, and a frame that
    ends with it is the stack (EXITED j,); masks.py keeps what needs which count apart.
  - a *state* S (an int) is a set of stacks; `step(S, byte)` is memoized, so a state reached again
    costs one dict lookup per byte. State 0 is dead (no stack).
"""
from __future__ import annotations

import heapq

from bitweb.grammar.gbnf import GrammarError, MAX_CODE_POINT

EXIT = -1
DEAD = 0
COUNTED = 6                    # X{m,n} with n >= this is counted, not unrolled
ABS, REL, EXITED = 0, 1, 2     # count element kinds: a generation's count, a walk's relative count, an exit marker
INF = 1 << 60
MAX_NODES = 400_000            # NFA nodes: a grammar that unrolls past this is refused
INLINE_MAX = 600               # a finite rule larger than this (estimated nodes) stays a call


# ---------------------------------------------------------------- UTF-8 byte sequences
def _split_same_length(lo: int, hi: int, out: list):
    if hi < 0x80:
        out.append(((lo, hi),))
        return
    n = len(chr(lo).encode("utf-8"))
    for i in range(1, n):
        m = (1 << (6 * i)) - 1
        if lo & ~m != hi & ~m:
            if lo & m:
                _split_same_length(lo, lo | m, out)
                _split_same_length((lo | m) + 1, hi, out)
                return
            if hi & m != m:
                _split_same_length(lo, (hi & ~m) - 1, out)
                _split_same_length(hi & ~m, hi, out)
                return
    out.append(tuple(zip(chr(lo).encode("utf-8"), chr(hi).encode("utf-8"))))


def utf8_sequences(ranges) -> list:
    """Code point ranges -> a list of byte-range sequences ((lo, hi), ...) whose concatenations
    are exactly the UTF-8 encodings of those code points (surrogates D800-DFFF left out)."""
    out = []
    for lo, hi in ranges:
        for a, b in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), min(hi, MAX_CODE_POINT))):
            for s, e in ((0, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, MAX_CODE_POINT)):
                x, y = max(a, s), min(b, e)
                if x <= y:
                    _split_same_length(x, y, out)
    return out


def byte_set(lo: int, hi: int) -> int:
    return ((1 << (hi + 1)) - 1) ^ ((1 << lo) - 1)


# ---------------------------------------------------------------- rule analysis
def _refs(e, out: set):
    k = e[0]
    if k == "ref":
        out.add(e[1])
    elif k in ("seq", "alt"):
        for x in e[1]:
            _refs(x, out)
    elif k == "rep":
        _refs(e[1], out)
    return out


def _unbounded(e) -> bool:
    k = e[0]
    if k in ("seq", "alt"):
        return any(_unbounded(x) for x in e[1])
    if k == "rep":
        return e[3] is None or _unbounded(e[1])
    return False


class Automaton:
    """The compiled grammar (see the module docstring). `start` is the initial state."""

    def __init__(self, rules: dict, root: str = "root"):
        self.rules = rules
        reach, todo = {root}, [root]
        while todo:
            for r in _refs(rules[todo.pop()], set()):
                if r not in reach:
                    reach.add(r)
                    todo.append(r)
        self._plan_inlining(reach, root)
        self.eps, self.edges, self.calls, self.toks = [], [], [], []
        self.rule_index = {}
        self.rule_start, self.rule_end = [], []
        self.counted = {}                        # synthetic rule index -> (m, n) of X{m,n}
        self._counted_rules = {}                 # (id(X), m, n) -> (rule index, X)
        called = [r for r in rules if r in reach and r not in self.inline]
        called.sort(key=lambda r: r != root)
        for r in called:
            self.rule_index[r] = len(self.rule_start)
            self.rule_start.append(self._new())
            self.rule_end.append(self._new())
        self.rule_names = list(called)
        for r in called:
            i = self.rule_index[r]
            self._build(rules[r], self.rule_start[i], self.rule_end[i])
        self._distances()
        self._prune()
        self._check_left_recursion()
        self.is_end = bytearray(len(self.eps))
        for n in self.rule_end:
            self.is_end[n] = 1
        self._closure = {}
        self.count_info, self._count_index = [], {}       # element -2 - k: (kind, rule, n)
        # local states
        self.D_sets, self.D_index = [], {}
        self.D_term, self.D_calls, self.D_final, self.D_dist, self.D_trans, self.D_toks = [], [], [], [], [], []
        self.start_D = [None] * len(self.rule_start)
        # states
        self.S_stacks, self.S_index, self.S_trans, self.S_dist = [], {}, [], []
        self.S_accept, self.S_exit, self._noexit, self._pop = [], [], {}, {}
        self.state(frozenset())                                   # DEAD = 0
        self.start = self.state(self.expand((self.start_of(0),)))

    # ------------------------------------------------------------ compile
    def _plan_inlining(self, reach, root):
        rules = self.rules
        deps = {r: _refs(rules[r], set()) for r in reach}
        recursive, state = set(), {}

        def visit(r, path):                       # marks every rule on a cycle as recursive
            state[r] = 1
            path.append(r)
            for x in deps[r]:
                if state.get(x) == 1:
                    recursive.update(path[path.index(x):])
                elif x not in state:
                    visit(x, path)
            path.pop()
            state[r] = 2

        for r in sorted(reach):
            if r not in state:
                visit(r, [])
        size, finite = {}, {}

        def est(e):
            k = e[0]
            if k in ("seq", "alt"):
                return sum(est(x) for x in e[1]) + 1
            if k == "chars":
                return 2 * len(e[1]) + 2
            if k == "ref":
                return size_of(e[1]) if is_finite(e[1]) else 1
            if k == "rep":
                if e[3] is not None and e[3] >= COUNTED:
                    return est(e[1]) + 4
                return est(e[1]) * max(e[2], e[3] or 1) + 2
            return 1

        def is_finite(r):
            if r not in finite:
                finite[r] = False
                finite[r] = r not in recursive and not _unbounded(rules[r]) and all(is_finite(x) for x in deps[r])
            return finite[r]

        def size_of(r):
            if r not in size:
                size[r] = INF
                size[r] = est(rules[r])
            return size[r]

        self.inline = {r for r in reach if r != root and is_finite(r) and size_of(r) <= INLINE_MAX}

    def _new(self) -> int:
        if len(self.eps) >= MAX_NODES:
            raise GrammarError(f"the grammar is too large: more than {MAX_NODES} automaton nodes once its "
                               f"repetitions are unrolled (use smaller {{m,n}} bounds)")
        self.eps.append([])
        self.edges.append([])
        self.calls.append([])
        self.toks.append([])
        return len(self.eps) - 1

    def _build(self, e, a: int, b: int, depth: int = 0):
        if depth > 400:
            raise GrammarError("the grammar nests too deeply (more than 400 levels)")
        k = e[0]
        if k == "seq":
            items = e[1]
            if not items:
                self.eps[a].append(b)
            cur = a
            for i, x in enumerate(items):
                nxt = b if i == len(items) - 1 else self._new()
                self._build(x, cur, nxt, depth + 1)
                cur = nxt
        elif k == "alt":
            for x in e[1]:
                self._build(x, a, b, depth + 1)
        elif k == "chars":
            for seq in utf8_sequences(e[1]):
                cur = a
                for i, (lo, hi) in enumerate(seq):
                    nxt = b if i == len(seq) - 1 else self._new()
                    self.edges[cur].append((byte_set(lo, hi), nxt))
                    cur = nxt
        elif k == "ref":
            if e[1] in self.inline:
                self._build(self.rules[e[1]], a, b, depth + 1)
            else:
                self.calls[a].append((self.rule_index[e[1]], b))
        elif k == "rep" and e[3] is not None and e[3] >= COUNTED:
            x, lo, hi = e[1], e[2], e[3]
            key = (id(x), lo, hi)
            if key not in self._counted_rules:
                r = len(self.rule_start)
                self._counted_rules[key] = (r, x)
                self.counted[r] = (lo, hi)
                self.rule_start.append(self._new())
                self.rule_end.append(self._new())
                self.rule_names.append(f"{{{lo},{hi}}}#{r}")
                self._build(x, self.rule_start[r], self.rule_end[r], depth + 1)
            self.calls[a].append((self._counted_rules[key][0], b))
            if lo == 0:
                self.eps[a].append(b)
        elif k == "rep":
            x, lo, hi = e[1], e[2], e[3]
            cur = a
            for _ in range(lo):
                nxt = self._new()
                self._build(x, cur, nxt, depth + 1)
                cur = nxt
            if hi is None:
                loop, back = self._new(), self._new()
                self.eps[cur].append(loop)
                self._build(x, loop, back, depth + 1)
                self.eps[back].append(loop)
                self.eps[loop].append(b)
            else:
                for _ in range(hi - lo):
                    self.eps[cur].append(b)
                    nxt = self._new()
                    self._build(x, cur, nxt, depth + 1)
                    cur = nxt
                self.eps[cur].append(b)
        elif k == "token":
            self.toks[a].append((e[1], e[2], b))
        else:
            raise GrammarError(f"unknown grammar expression {k!r}")

    def _distances(self):
        """dist[n]: fewest bytes (a token edge counts 1) from node n to its rule's end."""
        n_nodes = len(self.eps)
        rev_eps = [[] for _ in range(n_nodes)]
        rev_one = [[] for _ in range(n_nodes)]
        rev_call_t = [[] for _ in range(n_nodes)]
        rev_call_r = [[] for _ in self.rule_start]
        for n in range(n_nodes):
            for t in self.eps[n]:
                rev_eps[t].append(n)
            for _, t in self.edges[n]:
                rev_one[t].append(n)
            for *_, t in self.toks[n]:
                rev_one[t].append(n)
            for r, t in self.calls[n]:
                rev_call_t[t].append((n, r))
                rev_call_r[r].append((n, t))
        start_of = {s: r for r, s in enumerate(self.rule_start)}
        times = [max(self.counted[r][0], 1) if r in self.counted else 1 for r in range(len(self.rule_start))]
        dist = [INF] * n_nodes
        done = bytearray(n_nodes)
        heap = [(0, e) for e in self.rule_end]
        while heap:
            dn, n = heapq.heappop(heap)
            if done[n]:
                continue
            done[n], dist[n] = 1, dn
            for p in rev_eps[n]:
                heapq.heappush(heap, (dn, p))
            for p in rev_one[n]:
                heapq.heappush(heap, (dn + 1, p))
            for p, r in rev_call_t[n]:
                s = self.rule_start[r]
                if done[s]:
                    heapq.heappush(heap, (dn + dist[s] * times[r], p))
            r = start_of.get(n)
            if r is not None:
                for p, t in rev_call_r[r]:
                    if done[t]:
                        heapq.heappush(heap, (dist[t] + dn * times[r], p))
        self.dist = dist
        self.min_len = [dist[s] for s in self.rule_start]
        if dist[self.rule_start[0]] >= INF:
            raise GrammarError(f"the rule {self.rule_names[0]!r} matches no string (every alternative "
                               f"needs a character no class allows, or a rule that never ends)")

    def _prune(self):
        d, start = self.dist, self.rule_start
        for n in range(len(self.eps)):
            self.eps[n] = [t for t in self.eps[n] if d[t] < INF]
            self.edges[n] = [(bs, t) for bs, t in self.edges[n] if d[t] < INF and bs]
            self.calls[n] = [(r, t) for r, t in self.calls[n] if d[t] < INF and d[start[r]] < INF]
            self.toks[n] = [x for x in self.toks[n] if d[x[2]] < INF]

    def _check_left_recursion(self):
        nullable = [self.dist[s] == 0 for s in self.rule_start]
        left = []
        for r, s in enumerate(self.rule_start):
            seen, todo, out = {s}, [s], set()
            while todo:
                n = todo.pop()
                nxt = list(self.eps[n])
                for c, t in self.calls[n]:
                    out.add(c)
                    if nullable[c]:
                        nxt.append(t)
                for t in nxt:
                    if t not in seen:
                        seen.add(t)
                        todo.append(t)
            left.append(sorted(out))
        state = {}

        def visit(r, path):
            state[r] = 1
            for x in left[r]:
                if state.get(x) == 1:
                    cyc = path[path.index(x):] + [x]
                    names = " -> ".join(self.rule_names[i] for i in cyc)
                    raise GrammarError(f"left recursion: rule {self.rule_names[x]!r} can reach itself without "
                                       f"consuming input ({names}); rewrite it with repetition (x*)")
                if x not in state:
                    visit(x, path + [x])
            state[r] = 2

        for r in range(len(self.rule_start)):
            if r not in state:
                visit(r, [r])

    def closure(self, n: int) -> frozenset:
        """The nodes reachable from n by empty moves that do something: consume a byte or a token,
        call a rule, or end the rule."""
        got = self._closure.get(n)
        if got is None:
            seen, todo, out = {n}, [n], []
            while todo:
                m = todo.pop()
                if self.edges[m] or self.calls[m] or self.toks[m] or self.is_end[m]:
                    out.append(m)
                for t in self.eps[m]:
                    if t not in seen:
                        seen.add(t)
                        todo.append(t)
            got = self._closure[n] = frozenset(out)
        return got

    # ------------------------------------------------------------ local states
    def local(self, nodes: frozenset) -> int:
        got = self.D_index.get(nodes)
        if got is not None:
            return got
        d = len(self.D_sets)
        self.D_index[nodes] = d
        self.D_sets.append(nodes)
        for lst in (self.D_term, self.D_calls, self.D_final, self.D_dist, self.D_toks):
            lst.append(None)
        self.D_trans.append({})
        term = frozenset(n for n in nodes if self.edges[n] or self.toks[n])
        self.D_term[d] = -1 if not term else d if term == nodes else self.local(term)
        self.D_final[d] = any(self.is_end[n] for n in nodes)
        self.D_dist[d] = min((self.dist[n] for n in nodes), default=INF)
        rets = {}
        for n in nodes:
            for r, t in self.calls[n]:
                rets.setdefault(r, set()).update(self.closure(t))
        calls = []
        for r in sorted(rets):
            ret = self.local(frozenset(rets[r]))      # D_calls[ret] is None while ret is being made
            pure_end = self.D_term[ret] == -1 and self.D_calls[ret] == [] and self.D_final[ret]
            calls.append((self.start_of(r), -1 if pure_end else ret, r if r in self.counted else -1))
        self.D_calls[d] = calls
        self.D_toks[d] = [(ref, neg, self.local(self.closure(t))) for n in nodes for ref, neg, t in self.toks[n]]
        return d

    def start_of(self, r: int) -> int:
        """The local state at the start of rule r."""
        got = self.start_D[r]
        if got is None:
            got = self.start_D[r] = self.local(self.closure(self.rule_start[r]))
        return got

    def delta(self, d: int, b: int) -> int:
        """The local state after byte b from local state d (-1: no move)."""
        tr = self.D_trans[d]
        got = tr.get(b)
        if got is None:
            acc = set()
            for n in self.D_sets[d]:
                for bs, t in self.edges[n]:
                    if bs >> b & 1:
                        acc.update(self.closure(t))
            got = tr[b] = self.local(frozenset(acc)) if acc else -1
        return got

    # ------------------------------------------------------------ states
    def expand(self, stack: tuple, out: set | None = None) -> set:
        """The stacks a stack whose top was just reached stands for: calls entered, ended rules
        returned from, until every top consumes bytes (or the stack is () / (EXIT,))."""
        out = set() if out is None else out
        todo, seen = [stack], set()
        term, calls, final = self.D_term, self.D_calls, self.D_final
        while todo:
            s = todo.pop()
            if s in seen:
                continue
            seen.add(s)
            if not s or s[-1] == EXIT:
                out.add(s)
                continue
            d = s[-1]
            base = s[:-1]
            if d < 0:                                # a count element: an iteration of its rule ended
                kind, r, n = self.count_info[-2 - d]
                if kind == EXITED:                   # the frame below the repetition ended: exit with n
                    out.add((d,))
                    continue
                lo, hi = self.counted[r]
                if kind == ABS:
                    if n + 1 >= lo:
                        todo.append(base)
                    if n + 1 < hi:
                        todo.append(base + (self.count(ABS, r, n + 1), self.start_of(r)))
                else:                                # relative: any count may follow; masks.py sorts it out
                    done = self.count(EXITED, r, n + 1)        # stays under the return state, inert
                    todo.append(base[:-1] + (done, base[-1]) if base[-1] >= 0 else (done,))
                    if n + 1 < hi:
                        todo.append(base + (self.count(REL, r, n + 1), self.start_of(r)))
                continue
            if term[d] >= 0:
                out.add(base + (term[d],))
            for start, ret, counted in calls[d]:
                head = base + (ret,) if ret >= 0 else base
                todo.append(head + (self.count(ABS, counted, 0), start) if counted >= 0 else head + (start,))
            if final[d]:
                todo.append(base)
        return out

    def count(self, kind: int, r: int, n: int) -> int:
        """The stack element for (kind, counted rule, iterations done)."""
        key = (kind, r, n)
        got = self._count_index.get(key)
        if got is None:
            got = self._count_index[key] = -2 - len(self.count_info)
            self.count_info.append(key)
        return got

    def element_dist(self, e: int) -> int:
        """Fewest bytes an element of a stack still needs: a local state's to its rule's end, an
        absolute count's for the iterations still required."""
        if e >= 0:
            return self.D_dist[e]
        if e == EXIT:
            return 0
        kind, r, n = self.count_info[-2 - e]
        return max(0, self.counted[r][0] - n - 1) * self.min_len[r] if kind == ABS else 0

    def state(self, stacks) -> int:
        stacks = frozenset(stacks)
        got = self.S_index.get(stacks)
        if got is None:
            got = self.S_index[stacks] = len(self.S_stacks)
            self.S_stacks.append(stacks)
            self.S_trans.append({})
            ed = self.element_dist
            self.S_dist.append(min((sum(ed(e) for e in s) for s in stacks), default=INF))
            self.S_accept.append(() in stacks)
            self.S_exit.append(any(len(s) == 1 and s[0] < 0 for s in stacks))
        return got

    def step(self, sid: int, b: int) -> int:
        """The state after byte b (DEAD when no stack can take it). Memoized."""
        tr = self.S_trans[sid]
        got = tr.get(b)
        if got is None:
            out = set()
            delta = self.delta
            for s in self.S_stacks[sid]:
                if s and s[-1] >= 0:
                    nd = delta(s[-1], b)
                    if nd >= 0:
                        self.expand(s[:-1] + (nd,), out)
            got = tr[b] = self.state(out)
        return got

    def step_bytes(self, sid: int, data: bytes) -> int:
        for b in data:
            if sid == DEAD:
                break
            sid = self.step(sid, b)
        return sid

    def step_token(self, sid: int, token_id: int, ids_of) -> int:
        """The state after a whole token through the grammar's token elements (<[id]>, !<[id]>);
        ids_of(ref) -> the set of ids a token reference stands for."""
        out = set()
        for s in self.S_stacks[sid]:
            if s and s[-1] >= 0:
                for ref, neg, nd in self.D_toks[s[-1]]:
                    if (token_id in ids_of(ref)) != neg:
                        self.expand(s[:-1] + (nd,), out)
        return self.state(out)

    def has_tokens(self, sid: int) -> bool:
        return any(s and s[-1] >= 0 and self.D_toks[s[-1]] for s in self.S_stacks[sid])

    def noexit(self, sid: int) -> int:
        got = self._noexit.get(sid)
        if got is None:
            got = self._noexit[sid] = self.state(s for s in self.S_stacks[sid] if not (len(s) == 1 and s[0] < 0))
        return got

    def popped(self, rest: tuple) -> int:
        """The state once the frame on top of `rest` has ended: rest's top reached again."""
        got = self._pop.get(rest)
        if got is None:
            got = self._pop[rest] = self.state(self.expand(rest))
        return got

    def done(self, sid: int) -> bool:
        """Accepted with nothing more allowed."""
        return self.S_stacks[sid] == {()}
