"""The fine-tuning tasks of the quality benchmark (bench/quality/quality.py).

The base model knows one task family: the demo's counting,
"4 numbers after 35" -> "Sure: 36 37 38 39" (examples/demo/). Each task
here is related to it but new, so a fine-tune starts from something the
model already knows and has to bend it, as a fine-tune of a real model
does:

  stride   other strides:   "4 numbers after 35 by 3" -> "Sure: 38 41 44 47"
  reverse  reversed answers: "4 numbers before 35"    -> "Sure: 34 33 32 31"
  format   another format:  "4 numbers after 35 with commas"
                                                   -> "Sure: 36, 37, 38, 39"
  label    one label word (the SST-2 style): "4 numbers after 35, size?"
           -> "small" (50 and up: "large"); scored as a multiple choice of
           the two words, as the TACO preprint scores SST-2
  choice   a multiple-choice task: "4 numbers after 35, before?" ->
           "Sure: 34", scored by tacod's eval_multiple_choice among 34, 36,
           33 and 35

Every number is one token of the demo's tokenizer (" 35"), so what the
model learns is a mapping between tokens it knows. Validation examples are
items (a start and a count, say) that the training file never shows.
Every sequence fits the benchmark's 32 tokens. Only the standard
library: the benchmark runs wherever tacod builds.
"""
import json
import random

CHATML_PROMPT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
N_TRAIN = 1000
N_VAL = 64


def chat(prompt, answer):
    return {"messages": [{"role": "user", "content": prompt},
                         {"role": "assistant", "content": answer}]}


def mc(prompt, choices, answer):
    """One line of an eval_multiple_choice file: the prompt rendered as
    tacod renders the chat (ChatML, docs/datasets.md), so that a choice is
    scored exactly where training put the answer."""
    return {"prompt": CHATML_PROMPT.format(prompt), "choices": choices,
            "answer": answer}


def _stride(start, count, by):
    return (f"{count} numbers after {start} by {by}",
            "Sure:" + "".join(f" {start + by * i}"
                              for i in range(1, count + 1)))


def stride_items():
    return [(s, n, b) for b in (2, 3) for n in range(3, 6)
            for s in range(0, 100 - b * n)]


def reverse_items():
    return [(s, n) for n in range(3, 7) for s in range(n, 100)]


def _reverse(start, count):
    return (f"{count} numbers before {start}",
            "Sure:" + "".join(f" {start - i}" for i in range(1, count + 1)))


def format_items():
    return [(s, n) for n in range(3, 7) for s in range(0, 100 - n)]


def _format(start, count):
    return (f"{count} numbers after {start} with commas",
            "Sure: " + ", ".join(str(start + i)
                                 for i in range(1, count + 1)))


LABELS = ["small", "large"]  # five byte tokens each: a fair choice


def label_items():
    # a number and a count: is the number below 50 or not
    return [(s, n) for n in range(3, 7) for s in range(0, 100)]


def _label_text(start, count):
    return (f"{count} numbers after {start}, size?",
            LABELS[0 if start < 50 else 1])


def choice_items():
    return [(s, n) for n in range(3, 7) for s in range(2, 99)]


def _choice(start, count):
    return (f"{count} numbers after {start}, before?",
            f"Sure: {start - 1}")


def _split(items, rng):
    """N_VAL held-out items that the training file never shows, and the
    rest for training. (Holding out whole numbers instead fails: this
    small model learns a fact about a number only from examples of that
    number, so it cannot answer for a number it never saw in the task.)"""
    items = sorted(set(items))
    rng.shuffle(items)
    return items[N_VAL:], items[:N_VAL]


def _label_mc(val, rng):
    return [mc(_label_text(*i)[0], LABELS, LABELS.index(_label_text(*i)[1]))
            for i in val]


def _choice_mc(val, rng):
    out = []
    for s, n in val:
        # the right one, the one after, the two around it
        opts = [s - 1, s + 1, s - 2, s]
        order = list(range(4))
        rng.shuffle(order)
        out.append(mc(_choice(s, n)[0], [f"Sure: {opts[o]}" for o in order],
                      order.index(0)))
    return out


# name: (the items, an item's prompt and answer, the multiple-choice rows
# of the validation items or None), in the order the benchmark runs them
TASK_DEFS = {
    "stride": (stride_items, _stride, None),
    "reverse": (reverse_items, _reverse, None),
    "format": (format_items, _format, None),
    "label": (label_items, _label_text, _label_mc),
    "choice": (choice_items, _choice, _choice_mc),
}
TASKS = list(TASK_DEFS)
# the score a task is judged by: "mc" for the multiple-choice tasks, else
# validation token accuracy
SCORE = {t: "mc" if d[2] else "acc" for t, d in TASK_DEFS.items()}


def build(name, seed):
    """(train rows, validation rows, multiple-choice rows or None) of task
    NAME; SEED draws which items are held out and which are trained."""
    items, text, mc_rows = TASK_DEFS[name]
    rng = random.Random(f"{name}:{seed}")
    tr, va = _split(items(), rng)
    mcs = mc_rows(va, rng) if mc_rows else None
    train = [chat(*text(*rng.choice(tr))) for _ in range(N_TRAIN)]
    return train, [chat(*text(*i)) for i in va], mcs


def write(name, seed, out):
    """Writes task NAME's files for SEED into directory OUT:
    NAME_train.jsonl, NAME_val.jsonl and, for a multiple-choice score,
    NAME_mc.jsonl."""
    train, val, mcs = build(name, seed)
    files = [("train", train), ("val", val)] + ([("mc", mcs)] if mcs else [])
    for kind, rows in files:
        with open(f"{out}/{name}_{kind}.jsonl", "w") as f:
            for r in rows:
                f.write(json.dumps(r, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    # python3 bench/quality/tasks.py TASK SEED DIR: the files of one task,
    # as tests/fixtures/quality/ holds reverse's (tests/CMakeLists.txt
    # checks that they are current)
    import sys
    write(sys.argv[1], int(sys.argv[2]), sys.argv[3])
