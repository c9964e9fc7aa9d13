"""Regenerates data/bible_en_es/: English-Spanish verse pairs from two public-domain Bibles.

Needs only Python 3 and Debian's SWORD packages (no network):
  apt-get install -y diatheke sword-text-kjv sword-text-sparv
  python data/make_bible_pairs.py            # writes data/bible_en_es/, prints a summary

English: the King James Version (SWORD module engKJV2006eb, as data/kjv/ is).
Spanish: the Reina-Valera 1909 (SWORD module spaRV1909eb). Both use the KJV versification,
so verses align by reference (book, chapter, verse).

Writes, for each split in train/dev/test (xz-compressed, UTF-8, one verse a line, canonical
order; line i of .en pairs with line i of .es and of .refs):
  data/bible_en_es/{split}.en.xz    the English verse
  data/bible_en_es/{split}.es.xz    the Spanish verse
  data/bible_en_es/{split}.refs.xz  its reference, "Book chapter:verse" with the OSIS book
                                    name ("Gen 1:1", "1Cor 13:4", "Rev 22:21")
The split is by book (DEV_BOOKS, TEST_BOOKS; data/bible_en_es/README.md says why those).

Cleaning: the SWORD/OSIS markup that diatheke prints is dropped and the verse text kept:
word tags (<w>, whose attributes hold the Strong's numbers), <transChange> (the KJV's
italics: the words stay), <divineName>, <q>, <seg>, <foreign>, poetry and paragraph
milestones; footnotes and cross-references (<note>, <reference>) go with their content, and
so do USFM markers left over from the modules' conversion (the KJV's "the \\nd LORD").
Titles (<title>) stay only where the Reina-Valera prints the same words inside a verse: a
psalm's title and the acrostic letters of Psalm 119 start the verse they precede, and an
epistle's subscription ("Written to the Romans from Corinthus, ...") ends its last verse.
Where the RV module writes a supplied word against its neighbours, a space goes between them,
unless the word is a pronoun that the verb before it takes as an enclitic ("sácalo").
Pilcrows (¶) go; whitespace is normalized.

Pairing: by reference, chapter by chapter. In some chapters the Reina-Valera divides verses
differently (Num 13, Job 38-40, Jonah 2, ...); a chapter is dropped whole when a verse is
empty on either side or a length-based alignment of the chapter (Gale & Church) does not
pair every verse one to one with the verse of the same reference.
"""

import argparse
import collections
import html
import lzma
import math
import os
import re
import shutil
import subprocess
import sys

ENGLISH_MODULE = "engKJV2006eb"
SPANISH_MODULE = "spaRV1909eb"
PACKAGES = {"diatheke": "diatheke", ENGLISH_MODULE: "sword-text-kjv", SPANISH_MODULE: "sword-text-sparv"}
INSTALL = "apt-get install -y diatheke sword-text-kjv sword-text-sparv"

# (OSIS name, the name diatheke prints in its English locale), in canonical order.
BOOKS = [
    ("Gen", "Genesis"), ("Exod", "Exodus"), ("Lev", "Leviticus"), ("Num", "Numbers"),
    ("Deut", "Deuteronomy"), ("Josh", "Joshua"), ("Judg", "Judges"), ("Ruth", "Ruth"),
    ("1Sam", "I Samuel"), ("2Sam", "II Samuel"), ("1Kgs", "I Kings"), ("2Kgs", "II Kings"),
    ("1Chr", "I Chronicles"), ("2Chr", "II Chronicles"), ("Ezra", "Ezra"), ("Neh", "Nehemiah"),
    ("Esth", "Esther"), ("Job", "Job"), ("Ps", "Psalms"), ("Prov", "Proverbs"),
    ("Eccl", "Ecclesiastes"), ("Song", "Song of Solomon"), ("Isa", "Isaiah"), ("Jer", "Jeremiah"),
    ("Lam", "Lamentations"), ("Ezek", "Ezekiel"), ("Dan", "Daniel"), ("Hos", "Hosea"),
    ("Joel", "Joel"), ("Amos", "Amos"), ("Obad", "Obadiah"), ("Jonah", "Jonah"),
    ("Mic", "Micah"), ("Nah", "Nahum"), ("Hab", "Habakkuk"), ("Zeph", "Zephaniah"),
    ("Hag", "Haggai"), ("Zech", "Zechariah"), ("Mal", "Malachi"),
    ("Matt", "Matthew"), ("Mark", "Mark"), ("Luke", "Luke"), ("John", "John"), ("Acts", "Acts"),
    ("Rom", "Romans"), ("1Cor", "I Corinthians"), ("2Cor", "II Corinthians"),
    ("Gal", "Galatians"), ("Eph", "Ephesians"), ("Phil", "Philippians"), ("Col", "Colossians"),
    ("1Thess", "I Thessalonians"), ("2Thess", "II Thessalonians"), ("1Tim", "I Timothy"),
    ("2Tim", "II Timothy"), ("Titus", "Titus"), ("Phlm", "Philemon"), ("Heb", "Hebrews"),
    ("Jas", "James"), ("1Pet", "I Peter"), ("2Pet", "II Peter"), ("1John", "I John"),
    ("2John", "II John"), ("3John", "III John"), ("Jude", "Jude"), ("Rev", "Revelation of John"),
]
OSIS_BY_NAME = {name: osis for osis, name in BOOKS}
BOOK_ORDER = {osis: k for k, (osis, _) in enumerate(BOOKS)}

# Held-out books (OSIS names); every other book is training. See the data's README.
DEV_BOOKS = ("Dan", "Acts")
TEST_BOOKS = ("Ruth", "Esth", "Prov", "Eccl", "John")

# One verse as diatheke prints it: [pre-verse markup, e.g. a psalm title] "Psalms 3:1: " text.
VERSE_LINE = re.compile(
    r"^(?P<pre>(?:.*?>)?\s*)(?P<book>" + "|".join(re.escape(n) for _, n in sorted(BOOKS, key=lambda b: -len(b[1])))
    + r") (?P<chapter>\d+):(?P<verse>\d+): (?P<text>.*)$")
DROPPED_WITH_CONTENT = re.compile(r"<(note|reference)\b[^>]*?(?:/>|>.*?</\1\s*>)", re.S)
TITLE = re.compile(r"<title\b(?P<attrs>[^>]*?)(?:/>|>(?P<inner>.*?)</title\s*>)", re.S)
TAG = re.compile(r"<[^>]*>")
# The RV 1909 module writes a supplied word (<transChange>) against its neighbours, with no
# space: "de su grado</w><transChange>han dado</transChange><w>conforme". A space goes there,
# except for a supplied pronoun that a verb takes as an enclitic: "sáca</w><transChange>lo".
TOUCHING_WORDS = re.compile(r"(</(?:w|transChange)>)(?=<(?:w|transChange)\b)")
SUPPLIED_PRONOUN = re.compile(
    r"(?P<host>\w+)</w><transChange\b[^>]*>(?P<pronoun>l[aeo]s?|les|[mts]e|n?os)</transChange>(?=(?P<next>.?))")
# A host that takes it: an infinitive, a gerund, an imperative, a form accented before its
# last syllable (díjo, háce); or a lowercase form accented on it (plantó) before a pause.
ENCLITIC_HOST = re.compile(r"(?:r|ndo|d|[áéíóú]\w+)$|^(?:da|di|dí|haz|pon|ten|ven|sal|ve|he)$", re.I)
FINAL_ACCENT = re.compile(r"^[a-zñ]*[áéíóú]$")
USFM_MARKER = re.compile(r"\\\+?[a-z]+[0-9]*\*?")  # "\nd ": left over from the modules' conversion
TOKEN = re.compile(r"\w+|[^\w\s]")


def strip_markup(markup, keep_titles=False):
    """The plain text of one verse of diatheke's internal (OSIS) output.

    Footnotes and cross-references go with their content, and so do titles unless
    keep_titles; every other tag goes and its text stays."""
    text = DROPPED_WITH_CONTENT.sub(" ", markup)
    text = SUPPLIED_PRONOUN.sub(_supplied_pronoun, text)
    text = TOUCHING_WORDS.sub(r"\1 ", text)
    text = TITLE.sub(lambda match: " " + (match.group("inner") or "") + " " if keep_titles else " ", text)
    text = USFM_MARKER.sub(" ", TAG.sub("", text))
    text = html.unescape(text).replace("\u00b6", " ")
    return " ".join(text.split())


def _supplied_pronoun(match):
    host, pronoun, after = match.group("host"), match.group("pronoun"), match.group("next")
    enclitic = ENCLITIC_HOST.search(host) or (FINAL_ACCENT.match(host) and after in ("", " ", ",", ".", ";", ":"))
    return host + ("" if enclitic else " ") + pronoun + "</transChange>"  # (which TOUCHING_WORDS sees)


def parse_reference(reference):
    """"1Cor 13:4" -> ("1Cor", 13, 4); raises ValueError on anything else."""
    match = re.fullmatch(r"(\S+) (\d+):(\d+)", reference.strip())
    if not match or match.group(1) not in BOOK_ORDER:
        raise ValueError(f"not a reference: {reference!r}")
    return match.group(1), int(match.group(2)), int(match.group(3))


def format_reference(key):
    book, chapter, verse = key
    return f"{book} {chapter}:{verse}"


def parse_export(output):
    """diatheke's output for a range -> {(osis book, chapter, verse): plain text}.

    A line without a reference continues the verse before it; the trailing "(module)" line
    is ignored. Titles printed before a verse of the Psalms (a psalm's title, Psalm 119's
    acrostic letters) start that verse; titles printed after a verse's text (the epistles'
    subscriptions) end it; other pre-verse titles (section headings) are dropped."""
    verses = {}
    key = None
    for line in output.splitlines():
        match = VERSE_LINE.match(line)
        if match:
            key = (OSIS_BY_NAME[match.group("book")], int(match.group("chapter")), int(match.group("verse")))
            if key in verses:
                raise ValueError(f"{format_reference(key)} appears twice in diatheke's output")
            verses[key] = [strip_markup(match.group("pre"), keep_titles=key[0] == "Ps"),
                           strip_markup(match.group("text"), keep_titles=True)]
        elif key is not None and not re.fullmatch(r"\s*\(\w+\)\s*", line):
            verses[key].append(strip_markup(line, keep_titles=True))
    return {k: " ".join(" ".join(parts).split()) for k, parts in verses.items()}


def pair_verses(english, spanish):
    """Verse pairs [(key, en, es)] in canonical order, and {why: [keys]} for the others.

    Verses pair by reference, chapter by chapter. The Reina-Valera follows the Hebrew verse
    division in a few chapters (Num 13, Job 39, Jonah 2, ...), and the module files its verses
    under KJV numbers anyway: some come out empty, the others shifted, sometimes from one
    chapter into the next (Job 38:39 is the Spanish Job 39:1). A chapter is kept only when
    every verse has text on both sides and a length-based alignment of the chapter
    (align_lengths) pairs each verse one to one with the verse of the same reference;
    otherwise the whole chapter is dropped, as a shift can go on where lengths do not show it."""
    dropped = collections.defaultdict(list)
    chapters = collections.defaultdict(list)
    for key in sorted(set(english) | set(spanish), key=sort_key):
        chapters[key[:2]].append(key)
    pairs = []
    for keys in chapters.values():
        missing = [k for k in keys if k not in english or k not in spanish]
        empty = [k for k in keys if k not in missing and not (english[k] and spanish[k])]
        aligned = not missing and not empty and all(
            i1 - i0 == 1 and j1 - j0 == 1 and i0 == j0
            for (i0, i1), (j0, j1) in align_lengths([len(english[k]) for k in keys], [len(spanish[k]) for k in keys]))
        if aligned:
            pairs.extend((k, english[k], spanish[k]) for k in keys)
            continue
        dropped["only in one Bible"].extend(missing)
        dropped["empty on one side"].extend(empty)
        dropped["in a chapter whose verse division differs"].extend(k for k in keys if k not in missing + empty)
    return pairs, {why: keys for why, keys in dropped.items() if keys}


# Gale & Church (1993) length-based sentence alignment, on characters. The prior of each
# bead (sentences on one side, on the other); no 2-2 bead, so that two verses whose boundary
# merely moves a phrase stay two 1-1 pairs.
BEAD_PRIORS = {(1, 1): 0.94, (2, 1): 0.02, (1, 2): 0.02, (1, 0): 0.005, (0, 1): 0.005}
CHARS_RATIO = 0.92  # Spanish characters per English character (0.919 over the whole Bible)
CHARS_VARIANCE = 2.2  # variance of that, per English character (2.15 over aligned verses)


def length_cost(en_chars, es_chars):
    """-log P(the lengths match), Gale & Church's two-sided normal tail."""
    mean = (en_chars + es_chars / CHARS_RATIO) / 2
    if mean == 0:
        return 0.0
    delta = abs(es_chars - CHARS_RATIO * en_chars) / math.sqrt(mean * CHARS_VARIANCE)
    return -math.log(max(math.erfc(delta / math.sqrt(2)), 1e-300))


def align_lengths(en_lengths, es_lengths):
    """The cheapest sequence of beads covering both sides: [((i0, i1), (j0, j1)), ...],
    English sentences i0..i1-1 aligned with Spanish sentences j0..j1-1 (dynamic programming;
    ties go to the bead listed first in BEAD_PRIORS, so the result is deterministic)."""
    n, m = len(en_lengths), len(es_lengths)
    bead_costs = {bead: -math.log(p) for bead, p in BEAD_PRIORS.items()}
    cost = [[math.inf] * (m + 1) for _ in range(n + 1)]
    back = [[None] * (m + 1) for _ in range(n + 1)]
    cost[0][0] = 0.0
    for i in range(n + 1):
        for j in range(m + 1):
            for (di, dj), bead_cost in bead_costs.items():
                if i < di or j < dj or cost[i - di][j - dj] == math.inf:
                    continue
                c = (cost[i - di][j - dj] + bead_cost
                     + length_cost(sum(en_lengths[i - di:i]), sum(es_lengths[j - dj:j])))
                if c < cost[i][j]:
                    cost[i][j], back[i][j] = c, (di, dj)
    beads = []
    i, j = n, m
    while i or j:
        di, dj = back[i][j]
        beads.append(((i - di, i), (j - dj, j)))
        i, j = i - di, j - dj
    return beads[::-1]


def sort_key(key):
    book, chapter, verse = key
    return BOOK_ORDER[book], chapter, verse


def split_by_book(pairs, dev_books=DEV_BOOKS, test_books=TEST_BOOKS):
    """{"train": [...], "dev": [...], "test": [...]}: a pair goes where its book is listed,
    to train otherwise; order is kept."""
    overlap = set(dev_books) & set(test_books)
    if overlap:
        raise ValueError(f"books both in dev and test: {sorted(overlap)}")
    unknown = (set(dev_books) | set(test_books)) - set(BOOK_ORDER)
    if unknown:
        raise ValueError(f"unknown books: {sorted(unknown)}")
    splits = {"train": [], "dev": [], "test": []}
    for pair in pairs:
        book = pair[0][0]
        splits["dev" if book in dev_books else "test" if book in test_books else "train"].append(pair)
    return splits


def tokenize(text):
    """Lowercased words and punctuation marks (the README's token counts and 8-grams)."""
    return TOKEN.findall(text.lower())


def ngrams(tokens, n):
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


def ngram_overlap(held_out, train, n=8):
    """(held-out n-gram occurrences also found in train, all held-out n-gram occurrences).
    N-grams are taken within one sentence."""
    seen = {g for text in train for g in ngrams(tokenize(text), n)}
    grams = [g for text in held_out for g in ngrams(tokenize(text), n)]
    return sum(g in seen for g in grams), len(grams)


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def run_diatheke(*args):
    env = dict(os.environ, LANG="C.UTF-8", LC_ALL="C.UTF-8")
    result = subprocess.run(["diatheke", *args], capture_output=True, env=env, check=False)
    if result.returncode != 0:
        fail(f"diatheke {' '.join(args)} exited with {result.returncode}: "
             f"{result.stderr.decode('utf-8', 'replace').strip()}")
    return result.stdout.decode("utf-8")


def check_installed():
    if shutil.which("diatheke") is None:
        fail(f"diatheke is not installed; install the SWORD packages with: {INSTALL}")
    installed = set(run_diatheke("-b", "system", "-k", "modulelistnames").split())
    missing = [m for m in (ENGLISH_MODULE, SPANISH_MODULE) if m not in installed]
    if missing:
        plural = "s" if len(missing) > 1 else ""
        fail(f"SWORD module{plural} {', '.join(missing)} not installed (package{plural} "
             f"{', '.join(PACKAGES[m] for m in missing)}); install with: {INSTALL}")


def export(module):
    """The whole Bible of one module; -o h: diatheke then prints a psalm's title before
    verse 1 only (without it, the last title repeats before every later verse)."""
    verses = parse_export(run_diatheke("-b", module, "-o", "h", "-l", "en", "-k", "Gen-Rev"))
    if not verses:
        fail(f"diatheke printed no verses for {module}; reinstall with: {INSTALL}")
    return verses


def write_xz(path, lines):
    with lzma.open(path, "wb", format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=9) as f:
        f.write("".join(line + "\n" for line in lines).encode("utf-8"))


def package_versions():
    if shutil.which("dpkg-query") is None:
        return {}
    result = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\n", *sorted(set(PACKAGES.values()))],
                            capture_output=True, text=True, check=False)
    return dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out_dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "bible_en_es"))
    args = parser.parse_args(argv)
    check_installed()
    english, spanish = export(ENGLISH_MODULE), export(SPANISH_MODULE)
    pairs, dropped = pair_verses(english, spanish)
    splits = split_by_book(pairs)
    os.makedirs(args.out_dir, exist_ok=True)
    for name, rows in splits.items():
        write_xz(os.path.join(args.out_dir, f"{name}.en.xz"), [en for _, en, _ in rows])
        write_xz(os.path.join(args.out_dir, f"{name}.es.xz"), [es for _, _, es in rows])
        write_xz(os.path.join(args.out_dir, f"{name}.refs.xz"), [format_reference(k) for k, _, _ in rows])

    print(f"verses: {len(english)} {ENGLISH_MODULE}, {len(spanish)} {SPANISH_MODULE}; pairs: {len(pairs)}")
    for why, keys in dropped.items():
        per_chapter = collections.Counter(f"{book} {chapter}" for book, chapter, _ in keys)
        print(f"dropped, {why}: {len(keys)} ({', '.join(f'{c}: {n}' for c, n in per_chapter.items())})")
    for package, version in sorted(package_versions().items()):
        print(f"package: {package} {version}")
    train = splits["train"]
    for name, rows in splits.items():
        books = sorted({k[0] for k, _, _ in rows}, key=BOOK_ORDER.get)
        line = (f"{name}: {len(rows)} pairs, {len(books)} books"
                f"{' (' + ' '.join(books) + ')' if name != 'train' else ''}; tokens "
                f"en {sum(len(tokenize(en)) for _, en, _ in rows)}, es {sum(len(tokenize(es)) for _, _, es in rows)}")
        if name != "train":
            for side, col in (("en", 1), ("es", 2)):
                hit, total = ngram_overlap([r[col] for r in rows], [r[col] for r in train])
                line += f"; {side} 8-grams in train {hit}/{total} ({100.0 * hit / max(total, 1):.2f}%)"
        print(line)
    print(f"wrote {args.out_dir}")


if __name__ == "__main__":
    main()
