"""bitweb.authoring.tasks: the seeded chat-task generator, held-out split and exact-match scoring."""
import ast
import itertools
import sys
from pathlib import Path

import pytest

from bitweb.authoring import tasks as T


def take(gen, n):
    return list(itertools.islice(gen, n))


def test_stdlib_only():
    src = Path(T.__file__).read_text()
    mods = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            mods.add(node.module.split(".")[0])
    assert mods - {"__future__"} <= set(sys.stdlib_module_names), mods


def test_seeded_and_deterministic():
    a = [(e.task, e.question, e.answer, e.history) for e in take(T.generate(5), 300)]
    b = [(e.task, e.question, e.answer, e.history) for e in take(T.generate(5), 300)]
    c = [(e.task, e.question, e.answer, e.history) for e in take(T.generate(6), 300)]
    assert a == b
    assert a != c
    assert {e[0] for e in a} == set(T.TASKS)


def test_every_generated_answer_checks_and_a_wrong_one_does_not():
    for ex in take(T.generate(11), 4000):
        assert T.check(ex.task, ex.question, ex.answer), ex
        assert T.expected(ex.task, ex.question) == ex.answer
        for h in ex.history:
            assert h["role"] in ("system", "user", "assistant") and h["content"]
    # a perturbed answer fails for the slot tasks
    wrong = {"add": ("37 + 45 = 82.", "37 + 45 = 83."), "sub": ("20 - 45 = -25.", "20 - 45 = 25.")}
    assert T.check("add", "What is 37 + 45?", wrong["add"][0])
    assert not T.check("add", "What is 37 + 45?", wrong["add"][1])
    assert T.check("sub", "What is 20 - 45?", wrong["sub"][0])
    assert not T.check("sub", "What is 20 - 45?", wrong["sub"][1])


def test_heldout_split_is_disjoint_from_training():
    train_keys = {(e.task, e.key) for e in take(T.generate(3), 20000)}
    for t in T.TASKS:
        held = T.heldout(t)
        assert held, t
        assert all(T.is_heldout(t, e.key) for e in held)
        assert not any((t, e.key) in train_keys for e in held), t
        assert [e.question for e in held] == [e.question for e in T.heldout(t)]   # deterministic
        assert len({e.key if t not in ("greet", "self", "help") else e.question for e in held}) == len(held)
    assert all(not T.is_heldout(t, k) for t, k in train_keys)
    assert len(T.heldout("add")) == 200 and len(T.heldout("add", 7)) == 7


def test_multi_turn_history_comes_from_the_same_split():
    for ex in take(T.generate(9, multi_turn=1.0), 200):
        users = [h["content"] for h in ex.history if h["role"] == "user"]
        assert users
        for h, a in zip(ex.history, ex.history[1:]):
            if h["role"] == "user":
                assert a["role"] == "assistant"


@pytest.mark.parametrize("name", list(T.TEMPLATES))
def test_every_template_parses_back(name):
    task = "compare" if name.startswith("compare") else name
    slots = {"a": 412, "b": 398, "l": "r", "w": "strawberry", "d": "Friday"}
    for tpl in T.TEMPLATES[name]:
        q = tpl.format(**slots)
        v = T.parse(task, q)
        assert v is not None, q
        for k in ("a", "b", "l", "w", "d"):
            if "{" + k + "}" in tpl:
                assert v[k] == slots[k], (q, v)
        assert T.parse(task, q.lower()) == v   # case-insensitive


def test_worked_steps_are_correct_arithmetic_for_every_pair():
    """Every equation in the add/sub scratchpads holds, and the last column's result with the
    first column's units digit is the answer (so the model is never taught a wrong step)."""
    import re
    for a in range(100):
        for b in range(100):
            for task, op in (("add", "+"), ("sub", "-")):
                ans = T.expected(task, f"What is {a} {op} {b}?")
                steps, final = ans.rsplit(", so ", 1)
                assert final == f"{a} {op} {b} = {a + b if op == '+' else a - b}."
                for lhs, rhs in re.findall(r"(\d+(?:[-+]\d+)+)=(\d+)", steps):
                    assert eval(lhs) == int(rhs), (ans, lhs)      # digits and + / - only
                cols = [int(r) for _, r in re.findall(r"(\d+(?:[-+]\d+)+)=(\d+)", steps)]
                want = abs(a + b if op == "+" else a - b)
                assert (cols[1] * 10 + cols[0] % 10) == want, ans
                if op == "-":
                    assert steps.startswith(f"{max(a, b)} {'>' if a != b else '='} {min(a, b)}, ")


def test_check_examples():
    c = T.check
    assert c("add", "What is 37 + 45?", "37 + 45 = 82.")
    assert c("add", "What is 37 + 45?", "82")
    assert c("add", "What is 37 + 45?", "7+5=12, 3+4+1=8, so 37 + 45 = 82.")
    assert not c("add", "What is 37 + 45?", "7+5=12, 3+4+1=8, so 37 + 45 = 92.")
    assert not c("add", "What is 37 + 45?", "7+5=12, 3+4+1=8, so 37 + 45 = 82 or 92.")
    assert c("sub", "What is 37 - 45?", "45 > 37, 15-7=8, 4-1-3=0, so 37 - 45 = -8.")
    assert not c("sub", "What is 37 - 45?", "45 > 37, 15-7=8, 4-1-3=0, so 37 - 45 = 8.")
    assert not c("add", "What is 37 + 45?", "37 + 45 = 82 or 83.")
    assert not c("add", "What is 37 + 45?", "")
    assert c("sub", "Subtract 45 from 82.", "82 - 45 = 37.")
    assert not c("sub", "Subtract 45 from 82.", "45 - 82 = -37.")
    assert c("sub", "What is 3 - 9?", "3 - 9 = -6.")
    assert not c("sub", "What is 3 - 9?", "3 - 9 = 6.")
    assert c("compare", "Which is larger, 412 or 398?", "412 is larger.")
    assert not c("compare", "Which is larger, 412 or 398?", "398 is larger.")
    assert not c("compare", "Which is larger, 412 or 398?", "412 or 398.")
    assert c("compare", "Which is smaller, 412 or 398?", "398 is smaller.")
    assert c("compare", "Which is larger, 412 or 398?", "412 > 398, so 412 is larger.")
    assert c("compare", "Which is smaller, 412 or 398?", "412 > 398, so 398 is smaller.")
    assert not c("compare", "Which is smaller, 412 or 398?", "412 > 398, so 412 is smaller.")
    assert not c("compare", "Which is larger, 412 or 398?", "412 > 398, so 398 or 412 is larger.")
    assert c("count", "How many r's are in strawberry?", "There are 3 r's in strawberry.")
    assert c("count", "How many r's are in strawberry?", "s-t-r-a-w-b-e-r-r-y has 3 r's.")
    assert not c("count", "How many r's are in strawberry?", "There are 2 r's in strawberry.")
    assert not c("count", "How many r's are in strawberry?", "3 or 2")
    assert c("count", "How many z's are in apple?", "There are 0 z's in apple.")
    assert c("reverse", "Reverse the word cat.", "The word cat reversed is tac.")
    assert c("reverse", "Reverse the word cat.", "c-a-t backwards is t-a-c, so the word is tac.")
    assert not c("reverse", "Reverse the word cat.", "c-a-t backwards is t-a-c, so the word is tca.")
    assert not c("reverse", "Reverse the word cat.", "The word cat reversed is cat.")
    assert c("weekday", "What day comes after Sunday?", "The day after Sunday is Monday.")
    assert not c("weekday", "What day comes after Sunday?", "The day after Sunday is Tuesday.")
    assert not c("weekday", "What day comes after Sunday?", "Monday or Tuesday.")
    assert c("greet", "Hello!", T.HELLO)
    assert c("greet", "How are you?", T.FINE)
    assert not c("greet", "How are you?", T.HELLO)
    assert c("self", "Who are you?", "I am a small BitNet model running in your browser.")
    assert not c("self", "Who are you?", "I am a cat.")
    assert c("help", "What can you do?", T.HELP)
    assert c("help", "Tell me a joke", T.SORRY)
    assert not c("help", "Tell me a joke", T.HELP)


def test_unparseable_questions_raise_clear_errors():
    with pytest.raises(ValueError, match="matches no template"):
        T.expected("add", "What is the meaning of 37?")
    with pytest.raises(ValueError, match="unknown task"):
        T.expected("poetry", "Write a poem")
    with pytest.raises(ValueError, match="unknown question"):
        T.expected("greet", "Goodbye")


def test_count_steps_and_random_letter_words_only_in_training():
    assert T.count_steps("strawberry", "r") == "s-t-r1-a-w-b-e-r2-r3-y"
    assert T.count_steps("cat", "z") == "c-a-t"
    assert T.COUNT_STEPS is True
    assert T.expected("count", "How many r's are in strawberry?") == "s-t-r1-a-w-b-e-r2-r3-y has 3 r's."
    assert T.expected("count", "Count the letter a in cat.") == "c-a1-t has 1 a."
    assert T.check("count", "How many r's are in strawberry?", "s-t-r1-a-w-b-e-r2-r3-y has 3 r's.")
    assert not T.check("count", "How many r's are in strawberry?", "s-t-r1-a-w-b-e-r2-r3-y has 2 r's.")
    train = [e for e in take(T.generate(4), 6000) if e.task in ("count", "reverse")]
    words = {T.parse(e.task, e.question)["w"] for e in train}
    pseudo = words - set(T.WORDS)
    assert len(pseudo) > 100                                        # random letter strings are trained on
    for t in ("count", "reverse"):
        assert {T.parse(t, e.question)["w"] for e in T.heldout(t)} <= set(T.WORDS)   # held out: real words
