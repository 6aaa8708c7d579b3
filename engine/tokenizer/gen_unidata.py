#!/usr/bin/env python3
"""Writes tokenizer_unidata.h, the Unicode tables of the tokenizer, from
Python's unicodedata and unidata_tokenizers.json beside this script:

    python3 engine/tokenizer/gen_unidata.py > engine/tokenizer/tokenizer_unidata.h

Standard library only: CI runs it (the CTest test tokenizer_unidata_is_current
diffs its output with the committed header). The tables are those of what
Hugging Face `tokenizers` does; its Unicode versions are not Python's, so
unidata_tokenizers.json lists where tokenizers differs from unicodedata (at
the version named there, 14.0.0: Debian 12's Python 3.11). That file is
measured on tokenizers itself by
tests/fixtures/tokenizers/gen_tokenizers.py --unidata, which then runs this
script; nothing here needs tokenizers.

  normalization  the full canonical and compatibility decompositions, the
                 combining classes and the canonical compositions of
                 unicodedata, less the code points that tokenizers'
                 normalizers (an older Unicode) leave alone
  categories     General_Category as tokenizers' regex engine (Oniguruma, a
                 newer Unicode) has it: unicodedata's with the listed
                 changes; and where PCRE2's tables differ from it. PCRE2's
                 tables are those of its Unicode version, unicodedata's when
                 the versions are the same (the fixture script checks the
                 system's PCRE2 against unicodedata)
  names          the \\p{..} names of each category and group (Unicode's
                 PropertyValueAliases.txt, below) that Oniguruma reads so
  is_numeric     Rust's char::is_numeric (the Digits pre-tokenizer): \\p{N}
                 plus the listed ranges
  word chars     those next to which a single_word added token does not
                 match: regex \\w (L, M, Nd, Nl, Pc) with the listed changes
"""
import argparse
import json
import os
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "unidata_tokenizers.json")

# General_Category values, in the order of the C tables (tok_gc_*).
GC = ("Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So "
      "Zs Zl Zp Cc Cf Cs Co Cn").split()
GC_GROUPS = {"L": "Lu Ll Lt Lm Lo", "LC": "Lu Ll Lt", "M": "Mn Mc Me",
             "N": "Nd Nl No", "P": "Pc Pd Ps Pe Pi Pf Po", "S": "Sm Sc Sk So",
             "Z": "Zs Zl Zp", "C": "Cc Cf Cs Co Cn",
             "Assigned": " ".join(g for g in GC if g != "Cn")}
# The long names and aliases of each value (Unicode's
# PropertyValueAliases.txt). Those that Oniguruma does not read as that
# value (unidata_tokenizers.json's aliases_not_read; say "punct", POSIX's
# class in Oniguruma) stay out of the C table and keep PCRE2's meaning.
GC_ALIASES = {
    "C": ["Other"], "Cc": ["Control", "cntrl"], "Cf": ["Format"],
    "Cn": ["Unassigned"], "Co": ["Private_Use"], "Cs": ["Surrogate"],
    "L": ["Letter"], "LC": ["Cased_Letter"], "Ll": ["Lowercase_Letter"],
    "Lm": ["Modifier_Letter"], "Lo": ["Other_Letter"],
    "Lt": ["Titlecase_Letter"], "Lu": ["Uppercase_Letter"],
    "M": ["Mark", "Combining_Mark"], "Mc": ["Spacing_Mark"],
    "Me": ["Enclosing_Mark"], "Mn": ["Nonspacing_Mark"], "N": ["Number"],
    "Nd": ["Decimal_Number", "digit"], "Nl": ["Letter_Number"],
    "No": ["Other_Number"], "P": ["Punctuation", "punct"],
    "Pc": ["Connector_Punctuation"], "Pd": ["Dash_Punctuation"],
    "Pe": ["Close_Punctuation"], "Pf": ["Final_Punctuation"],
    "Pi": ["Initial_Punctuation"], "Po": ["Other_Punctuation"],
    "Ps": ["Open_Punctuation"], "S": ["Symbol"], "Sc": ["Currency_Symbol"],
    "Sk": ["Modifier_Symbol"], "Sm": ["Math_Symbol"], "So": ["Other_Symbol"],
    "Z": ["Separator"], "Zl": ["Line_Separator"],
    "Zp": ["Paragraph_Separator"], "Zs": ["Space_Separator"], "Assigned": [],
}
# The categories of regex \w, the rule of the word chars.
WORD_GC = ("Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "Pc")

ALL_CPS = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
# What the normalization tables cover: the Hangul syllables are computed.
NORM_CPS = [c for c in range(1, 0x110000)
            if not 0xD800 <= c < 0xE000 and not 0xAC00 <= c <= 0xD7A3]


# ---------------------------------------------------------------- ranges

def flat_ranges(cps):
    """Sorted code points as [lo, hi, lo, hi, ...]."""
    out = []
    for c in cps:
        if out and out[-1] == c - 1:
            out[-1] = c
        else:
            out += [c, c]
    return out


def range_string(lo, hi):
    """[lo, hi] as "LO..HI" (or "CP") in hex, as in the data file."""
    return f"{lo:04X}" if lo == hi else f"{lo:04X}..{hi:04X}"


def range_strings(cps):
    """Sorted code points as range_string()s."""
    f = flat_ranges(cps)
    return [range_string(lo, hi) for lo, hi in zip(f[::2], f[1::2])]


def parse_range(s):
    lo, _, hi = s.partition("..")
    return int(lo, 16), int(hi or lo, 16)


def range_set(strings):
    out = set()
    for s in strings:
        lo, hi = parse_range(s)
        out.update(range(lo, hi + 1))
    return out


def norm_name(name):
    """A property name as both engines compare them: case, spaces, '-' and
    '_' ignored."""
    return "".join(ch for ch in name.lower() if ch not in " -_")


# ---------------------------------------------------------------- tables

def normalization(data):
    """The decompositions, combining classes and compositions: (canon,
    compat, ccc, comp). The code points listed in data are those that
    tokenizers' normalizers leave as they are (NFD, NFKD), or do not reorder
    by their combining class, while unicodedata does not: unassigned in
    tokenizers' Unicode version."""
    nz = data["normalizers"]
    no_canon = range_set(nz["no_canonical"])
    no_compat = range_set(nz["no_compatibility"])
    no_ccc = range_set(nz["no_combining_class"])
    canon, compat = [], []
    for cp in NORM_CPS:
        ch = chr(cp)
        a = ch if cp in no_canon else unicodedata.normalize("NFD", ch)
        b = ch if cp in no_compat else unicodedata.normalize("NFKD", ch)
        if a != ch:
            canon.append((cp, [ord(x) for x in a]))
        if b != a:
            compat.append((cp, [ord(x) for x in b]))
    ccc = [(c, unicodedata.combining(chr(c))) for c in NORM_CPS
           if unicodedata.combining(chr(c)) and c not in no_ccc]
    return canon, compat, ccc, compositions(canon)


def compositions(canon):
    """The primary composites: canonical pairs that NFC composes (those not
    excluded from composition), as (a, b, composite), sorted."""
    comp = []
    for cp, _ in canon:
        ch = chr(cp)
        dec = unicodedata.decomposition(ch)
        if unicodedata.normalize("NFC", ch) != ch or not dec or dec.startswith("<"):
            continue
        parts = [int(x, 16) for x in dec.split()]
        if len(parts) == 2:
            comp.append((parts[0], parts[1], cp))
    return sorted(comp)


def categories(data):
    """General_Category of every code point as tokenizers' regex engine has
    it (surrogates Cs)."""
    gc = [unicodedata.category(chr(c)) for c in range(0x110000)]
    for s, g in data["categories"]:
        lo, hi = parse_range(s)
        gc[lo:hi + 1] = [g] * (hi - lo + 1)
    return gc


def group_members(gc):
    """{value or group: sorted code points} over gc."""
    members = {g: [] for g in GC}
    for c in ALL_CPS:
        members[gc[c]].append(c)
    for g, subs in GC_GROUPS.items():
        members[g] = sorted(c for s in subs.split() for c in members[s])
    return members


def word_rule(gc):
    """The code points of regex \\w's categories."""
    return {c for c in ALL_CPS if gc[c] in WORD_GC}


def gc_names(data):
    """{normalized \\p{..} name: mask} of the names tokenizers reads."""
    idx = {g: i for i, g in enumerate(GC)}
    names = {}
    for g in list(GC) + list(GC_GROUPS):
        names[norm_name(g)] = sum(1 << idx[s] for s in GC_GROUPS.get(g, g).split())
    skip = set(data["aliases_not_read"])
    for g, aliases in GC_ALIASES.items():
        for a in aliases:
            if a not in skip:
                names[norm_name(a)] = names[norm_name(g)]
    return names


# ---------------------------------------------------------------- C text

def fill(items, indent="\t", width=80):
    """items, each followed by ',', as few lines of at most width columns
    (a tab is 8) as fit."""
    lines, cur = [], ""
    room = width - (8 if indent == "\t" else len(indent))
    for it in items:
        add = it + ","
        if cur and len(cur) + 1 + len(add) > room:
            lines.append(indent + cur)
            cur = add
        else:
            cur = cur + " " + add if cur else add
    if cur:
        lines.append(indent + cur)
    return lines


def array(decl, items):
    return [decl + " = {"] + fill(items) + ["};"]


def seqs(name, table):
    pool, idx = [], []
    for cp, s in table:
        idx.append(f"{{0x{cp:X}, {len(pool)}, {len(s)}}}")
        pool.extend(s)
    return (array(f"static const uint32_t {name}_pool[{len(pool)}]",
                  [f"0x{x:X}" for x in pool]) + [""] +
            array(f"static const struct tok_decomp {name}[{len(idx)}]", idx))


def normalization_text(data):
    canon, compat, ccc, comp = normalization(data)
    return (["/* Full decompositions (already recursive and canonically "
             "ordered). */",
             "struct tok_decomp {", "\tuint32_t cp;", "\tuint32_t off;",
             "\tuint32_t len;", "};", "",
             "struct tok_ccc {", "\tuint32_t cp;", "\tuint8_t ccc;", "};", "",
             "struct tok_comp {", "\tuint32_t a, b, c;", "};", ""] +
            seqs("tok_canon", canon) + [""] + seqs("tok_compat", compat) +
            [""] +
            array(f"static const struct tok_ccc tok_ccc_table[{len(ccc)}]",
                  [f"{{0x{c:X}, {k}}}" for c, k in ccc]) + [""] +
            array(f"static const struct tok_comp tok_comp_table[{len(comp)}]",
                  [f"{{0x{a:X}, 0x{b:X}, 0x{c:X}}}" for a, b, c in comp]))


def categories_text(data):
    gc = categories(data)
    idx = {g: i for i, g in enumerate(GC)}
    runs = [(c, idx[gc[c]]) for c in range(0x110000)
            if c == 0 or gc[c] != gc[c - 1]]
    diff = []  # where PCRE2's tables (unicodedata's) differ
    for c in ALL_CPS:
        p = unicodedata.category(chr(c))
        if gc[c] == p:
            continue
        key = (idx[gc[c]], idx[p])
        if diff and diff[-1][1] == c - 1 and tuple(diff[-1][2:]) == key:
            diff[-1][1] = c
        else:
            diff.append([c, c, *key])
    names = gc_names(data)
    version = unicodedata.unidata_version
    return (["/* General_Category as the regex engine of tokenizers "
             "(Oniguruma) has it:",
             " * tok_gc_runs[i] starts a run of code points of category",
             " * tok_gc_runs[i].gc (an index into tok_gc_short) that ends "
             "where the",
             " * next run starts. */",
             f"#define TOK_GC_COUNT {len(GC)}"] +
            array("static const char *const tok_gc_short[TOK_GC_COUNT]",
                  [f'"{g}"' for g in GC]) +
            ["", "struct tok_gc_run {", "\tuint32_t lo;", "\tuint8_t gc;",
             "};", "", "struct tok_gc_diff {", "\tuint32_t lo, hi;",
             "\tuint8_t hf, pcre2;", "};", "", "struct tok_gc_name {",
             "\tconst char *name;", "\tuint32_t mask;", "};", ""] +
            array(f"static const struct tok_gc_run tok_gc_runs[{len(runs)}]",
                  [f"{{0x{lo:X}, {g}}}" for lo, g in runs]) +
            ["", "/* The code points whose category differs in PCRE2's "
             "tables of",
             f" * Unicode {version} (hf: as above, pcre2: PCRE2's). */",
             f'#define TOK_GC_PCRE2_UNICODE "{version}"'] +
            array("static const struct tok_gc_diff "
                  f"tok_gc_pcre2_diff[{len(diff)}]",
                  [f"{{0x{lo:X}, 0x{hi:X}, {a}, {b}}}"
                   for lo, hi, a, b in diff]) +
            ["", "/* \\p{..} names (lower case, without ' ', '-', '_') that "
             "tokenizers",
             " * reads as categories: bit i of mask is category i. */"] +
            array(f"static const struct tok_gc_name tok_gc_names[{len(names)}]",
                  [f'{{"{n}", 0x{m:X}}}' for n, m in sorted(names.items())]))


def pairs(cps):
    f = flat_ranges(sorted(cps))
    return [f"{{0x{lo:X}, 0x{hi:X}}}" for lo, hi in zip(f[::2], f[1::2])]


def chars_text(data):
    gc = categories(data)
    numeric = pairs(range_set(data["numeric_extra"]))
    word = (word_rule(gc) | range_set(data["word_extra"])) - \
        range_set(data["word_not"])
    word = pairs(word)
    return (["/* char::is_numeric (the Digits pre-tokenizer) as tokenizers "
             "has it:",
             " * \\p{N} above plus these ranges [lo, hi]. */"] +
            array(f"static const uint32_t tok_numeric_extra[{len(numeric)}][2]",
                  numeric) +
            ["", "/* The chars that tokenizers counts as word chars next to "
             "a single_word",
             " * added token (ranges [lo, hi]). */"] +
            array(f"static const uint32_t tok_word_ranges[{len(word)}][2]",
                  word))


def header(data):
    lines = ["/* tokenizer_unidata.h: Unicode normalization tables of the "
             "tokenizer,",
             " * and the char classes of its regex patterns, Digits and "
             "single_word.",
             " * GENERATED by engine/tokenizer/gen_unidata.py from Python's "
             f"unicodedata {data['unicodedata']}",
             " * and unidata_tokenizers.json (where Hugging Face tokenizers "
             f"{data['tokenizers']}",
             " * differs from it). Do not edit. */",
             "#ifndef TOKENIZER_UNIDATA_H", "#define TOKENIZER_UNIDATA_H", "",
             "#include <stdint.h>", "",
             "/* Laid out by gen_unidata.py, not clang-format. */",
             "/* clang-format off */", ""]
    lines += normalization_text(data) + [""]
    lines += categories_text(data) + [""]
    lines += chars_text(data) + [""]
    lines += ["/* clang-format on */", "", "#endif"]
    return "\n".join(lines) + "\n"


def load(path=DATA):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if data["unicodedata"] != unicodedata.unidata_version:
        sys.exit(f"gen_unidata.py: {path} is against unicodedata "
                 f"{data['unicodedata']}, this Python has "
                 f"{unicodedata.unidata_version} (run it with Python 3.11)")
    return data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=DATA,
                    help="the tokenizers data (default: %(default)s)")
    ap.add_argument("-o", "--output", help="write here, not to stdout")
    args = ap.parse_args()
    text = header(load(args.data))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
