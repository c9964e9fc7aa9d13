"""data/make_bible_pairs.py's pure functions, on lines diatheke 1.9 printed for the Debian
modules (engKJV2006eb 14.3, spaRV1909eb 2.60). Needs neither diatheke nor data/."""

import importlib.util
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "make_bible_pairs.py")
_spec = importlib.util.spec_from_file_location("make_bible_pairs", SCRIPT)
bp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bp)

KJV_GEN_1_2 = (
    'Genesis 1:2: And the <w savlm="strong:H0776">earth</w> <w savlm="strong:H1961">was</w> without '
    '<w savlm="strong:H8414">form</w>, and <w savlm="strong:H0922">void</w>; and <w savlm="strong:H2822">'
    'darkness</w> <transChange type="added">was</transChange> upon the <w savlm="strong:H6440">face</w> of the '
    '<w savlm="strong:H8415">deep</w>. And the <w savlm="strong:H7307">Spirit</w> of <w savlm="strong:H0430">'
    'God</w> <w savlm="strong:H7363">moved</w> <w savlm="strong:H5921">upon</w> the <w savlm="strong:H6440">'
    'face</w> of the <w savlm="strong:H4325">waters</w>.  <div eID="gen3" type="x-p"/>')
KJV_GEN_1_6 = (
    '<div sID="gen5" type="x-p"/> Genesis 1:6: \u00b6 And <w savlm="strong:H0430">God</w> '
    '<w savlm="strong:H0559">said</w>, Let there be a <w savlm="strong:H7549">firmament</w> in the '
    '<w savlm="strong:H8432">midst</w> of the <w savlm="strong:H4325">waters</w>, and let it '
    '<w savlm="strong:H0914">divide</w> the <w savlm="strong:H4325">waters</w> from the '
    '<w savlm="strong:H4325">waters</w>.')
KJV_PS_3_1 = (
    '<title canonical="true" type="psalm">A <w savlm="strong:H4210">Psalm</w> of <w savlm="strong:H1732">'
    'David</w>, when he <w savlm="strong:H1272">fled</w> <w savlm="strong:H6440">from</w> '
    '<w savlm="strong:H0053">Absalom</w> his <w savlm="strong:H1121">son</w>.</title> <lg sID="gen2600"/> '
    '<l level="1" sID="gen2601"/> Psalms 3:1: <divineName><w savlm="strong:H3068">LORD</w></divineName>, how '
    'are they <w savlm="strong:H7231">increased</w> that <w savlm="strong:H6862">trouble</w> me! '
    '<w savlm="strong:H7227">many</w> <transChange type="added">are</transChange> they that rise '
    '<w savlm="strong:H6965">up</w> against me. <l eID="gen2601" level="1"/>')
KJV_PS_119_9 = (
    '<title><foreign>\u05d1 BETH.</foreign></title> <lg sID="gen4643"/> <l level="1" sID="gen4644"/> '
    'Psalms 119:9: Wherewithal shall a young <w savlm="strong:H5288">man</w> <w savlm="strong:H2135">'
    'cleanse</w> his <w savlm="strong:H0734">way</w>? by taking <w savlm="strong:H8104">heed</w> '
    '<transChange type="added">thereto</transChange> according to thy <w savlm="strong:H1697">word</w>. '
    '<l eID="gen4644" level="1"/>')
KJV_LEV_24_13 = (
    '<div sID="gen701" type="x-p"/> Leviticus 24:13: And the \\nd <w savlm="strong:H3068">LORD</w></divineName> '
    '<w savlm="strong:H1696">spake</w> unto <w savlm="strong:H4872">Moses</w>, <w savlm="strong:H0559">'
    'saying</w>,')
KJV_ROM_16_27 = (
    '<div sID="gen9005" type="x-p"/> Romans 16:27: To <w savlm="strong:G2316">God</w> <w savlm="strong:G3441">'
    'only</w> <w savlm="strong:G4680">wise</w>, <transChange type="added">be</transChange> '
    '<w savlm="strong:G1391">glory</w> <w savlm="strong:G1223">through</w> <w savlm="strong:G2424">Jesus</w> '
    '<w savlm="strong:G5547">Christ</w> <w savlm="strong:G1519">for</w> <w savlm="strong:G0165">ever</w>. '
    '<w savlm="strong:G0281">Amen</w>.  <div eID="gen9005" type="x-p"/> <chapter eID="Rom.16"/> '
    '<title>Written to the Romans from Corinthus, <transChange type="added">and sent</transChange> by Phebe '
    'servant of the church at Cenchrea.</title> <div canonical="true" eID="gen8965" osisID="Rom" type="book"/>')
RV_GEN_1_1 = (
    'Genesis 1:1: <w savlm="strong:H7225">EN el principio</w> <w savlm="strong:H1254">cri\u00f3</w> '
    '<w savlm="strong:H0430">Dios</w> <w savlm="strong:H8064">los cielos</w> <w savlm="strong:H0776">'
    'y la tierra</w>.')
RV_PS_3_1 = (
    'Psalms 3:1: <w savlm="strong:H4210">Salmo</w> <w savlm="strong:H1732">de David</w>, '
    '<w savlm="strong:H1272">cuando hu\u00eda</w> <w savlm="strong:H6440">de delante</w> '
    '<w savlm="strong:H0053">de Absalom</w> <w savlm="strong:H1121">su hijo</w>. \u00a1<w savlm="strong:H1121">'
    'OH</w> <w savlm="strong:H3068">Jehov\u00e1</w>, <w savlm="strong:H4100">cu\u00e1nto se</w> '
    '<w savlm="strong:H7231">han multiplicado</w> <w savlm="strong:H6862">mis enemigos</w>! '
    '<w savlm="strong:H7227">muchos</w> <w savlm="strong:H4100">se</w> <w savlm="strong:H6965">levantan</w> '
    '<w savlm="strong:H5921">contra</w> m\u00ed.')
RV_PS_117_2 = (
    'Psalms 117:2: <w savlm="strong:H3588">Porque</w> <w savlm="strong:H1396">ha engrandecido</w> '
    '<w savlm="strong:H5921">sobre</w> <w savlm="strong:H0587">nosotros</w> <w savlm="strong:H2617">su '
    'misericordia</w>; <w savlm="strong:H0571">y la verdad</w> <w savlm="strong:H3068">de Jehov\u00e1</w>'
    '<transChange type="added">es</transChange><w savlm="strong:H5769">para siempre</w>. '
    '<w lemma="H3050" savlm="strong:H1984 H3050">Aleluya</w>. <chapter eID="Ps.117"/><div eID="gen615" type="x-p"/>')
RV_LUKE_11_3 = (
    'Luke 11:3: <w savlm="strong:G3588">El</w> <w savlm="strong:G0740">pan</w> <w savlm="strong:G2257">nuestro</w> '
    '<w savlm="strong:G1967">de cada d\u00eda</w>, <w lemma="G2254" savlm="strong:G1325 G2254">d\u00e1nos</w>'
    '<transChange type="added">lo</transChange><w lemma="G2250" savlm="strong:G2596 G2250">hoy</w>.')
RV_HEB_6_3 = (
    'Hebrews 6:3: <w savlm="strong:G2532">Y</w> <w savlm="strong:G5124">esto</w> <w savlm="strong:G4160">haremos'
    '</w> <w savlm="strong:G4007">\u00e1 la verdad</w>, <w savlm="strong:G1437">si</w> <w savlm="strong:G2316">'
    'Dios</w><transChange type="added">lo</transChange><w savlm="strong:G2010">permitiere</w>.')


def text_of(line):
    return bp.parse_export(line)


def test_strip_markup_keeps_the_words_and_drops_strongs_and_milestones():
    assert text_of(KJV_GEN_1_2) == {("Gen", 1, 2): (
        "And the earth was without form, and void; and darkness was upon the face of the deep. "
        "And the Spirit of God moved upon the face of the waters.")}
    assert text_of(RV_GEN_1_1) == {("Gen", 1, 1): "EN el principio cri\u00f3 Dios los cielos y la tierra."}


def test_pilcrow_and_leftover_usfm_marker_go():
    assert text_of(KJV_GEN_1_6)[("Gen", 1, 6)].startswith("And God said, Let there be a firmament")
    assert text_of(KJV_LEV_24_13) == {("Lev", 24, 13): "And the LORD spake unto Moses, saying,"}


def test_supplied_spanish_words_get_their_spaces_and_enclitics_join_their_verb():
    assert text_of(RV_PS_117_2) == {("Ps", 117, 2): (
        "Porque ha engrandecido sobre nosotros su misericordia; y la verdad de Jehov\u00e1 es para siempre. Aleluya.")}
    assert text_of(RV_LUKE_11_3) == {("Luke", 11, 3): "El pan nuestro de cada d\u00eda, d\u00e1noslo hoy."}
    assert text_of(RV_HEB_6_3)[("Heb", 6, 3)].endswith("si Dios lo permitiere.")

    def supplied(host, pronoun, after):
        return bp.strip_markup(f'<w savlm="x">{host}</w><transChange type="added">{pronoun}</transChange>{after}')

    assert supplied("s\u00e1ca", "lo", " <w>y</w>") == "s\u00e1calo y"  # accent before the last syllable
    assert supplied("Dad", "me", " de") == "Dadme de"  # imperative
    assert supplied("decir", "les", ": <w>Esta</w>") == "decirles: Esta"  # infinitive
    assert supplied("plant\u00f3", "la", " <w>x</w>") == "plant\u00f3la x"  # final accent, then a pause
    assert supplied("Jehov\u00e1", "los", "<w>acose</w>") == "Jehov\u00e1 los acose"
    assert supplied("Como", "lo", "<w>o\u00edmos</w>") == "Como lo o\u00edmos"


def test_psalm_titles_start_verse_one_on_both_sides():
    assert text_of(KJV_PS_3_1) == {("Ps", 3, 1): (
        "A Psalm of David, when he fled from Absalom his son. "
        "LORD, how are they increased that trouble me! many are they that rise up against me.")}
    assert text_of(RV_PS_3_1)[("Ps", 3, 1)].startswith("Salmo de David, cuando hu\u00eda de delante de Absalom")
    assert text_of(KJV_PS_119_9)[("Ps", 119, 9)].startswith("\u05d1 BETH. Wherewithal shall a young man")


def test_subscription_ends_the_last_verse_and_headings_outside_psalms_go():
    assert text_of(KJV_ROM_16_27)[("Rom", 16, 27)] == (
        "To God only wise, be glory through Jesus Christ for ever. Amen. Written to the Romans from "
        "Corinthus, and sent by Phebe servant of the church at Cenchrea.")
    heading = '<title type="section">The Creation</title> <div sID="gen1" type="x-p"/> ' + RV_GEN_1_1
    assert text_of(heading) == text_of(RV_GEN_1_1)


def test_footnotes_and_cross_references_go_with_their_content():
    markup = ('In the <w savlm="strong:H7225">beginning</w><note type="study" n="a">Or, <hi>first</hi> of '
              'all</note> God created<note type="crossReference"><reference osisRef="John.1.1">John 1:1'
              '</reference></note> the heaven &amp; the earth.<reference osisRef="Heb.11.3">Heb 11:3</reference>')
    assert bp.strip_markup(markup) == "In the beginning God created the heaven & the earth."
    assert bp.strip_markup("  a \n\t b  ") == "a b"
    assert bp.strip_markup('<title>x</title> y', keep_titles=True) == "x y"
    assert bp.strip_markup('<title>x</title> y') == "y"


def test_parse_export_joins_continuations_and_skips_the_module_line():
    output = "\n".join([KJV_GEN_1_2, "continued <w>here</w>", RV_GEN_1_1.replace("1:1", "1:3"), "(engKJV2006eb)", ""])
    verses = bp.parse_export(output)
    assert list(verses) == [("Gen", 1, 2), ("Gen", 1, 3)]
    assert verses[("Gen", 1, 2)].endswith("face of the waters. continued here")
    assert bp.parse_export("(spaRV1909eb)\n") == {}
    book_names = ("I Samuel 3:4: x\nSong of Solomon 1:1: y\nRevelation of John 22:21: z\nIII John 1:1: w\n"
                  "John 3:16: v")
    assert list(bp.parse_export(book_names)) == [("1Sam", 3, 4), ("Song", 1, 1), ("Rev", 22, 21), ("3John", 1, 1),
                                                 ("John", 3, 16)]
    with pytest.raises(ValueError, match="Gen 1:2 appears twice"):
        bp.parse_export(KJV_GEN_1_2 + "\n" + KJV_GEN_1_2)


def test_references_round_trip_and_bad_ones_raise():
    assert bp.parse_reference("1Cor 13:4") == ("1Cor", 13, 4)
    assert bp.parse_reference(" Rev 22:21\n") == ("Rev", 22, 21)
    assert bp.format_reference(("Ps", 119, 176)) == "Ps 119:176"
    for key in [("Gen", 1, 1), ("3John", 1, 15), ("Song", 8, 14)]:
        assert bp.parse_reference(bp.format_reference(key)) == key
    for bad in ["Genesis 1:1", "Gen 1", "Gen 1:1a", "Tob 1:1", ""]:
        with pytest.raises(ValueError):
            bp.parse_reference(bad)
    assert len(bp.BOOKS) == 66 and len(bp.OSIS_BY_NAME) == 66


def test_split_by_book_keeps_order_and_rejects_bad_lists():
    pairs = [(("Gen", 1, 1), "a", "b"), (("Ruth", 1, 1), "c", "d"), (("Acts", 1, 1), "e", "f"),
             (("Ruth", 1, 2), "g", "h"), (("Rev", 1, 1), "i", "j")]
    splits = bp.split_by_book(pairs, dev_books=("Acts",), test_books=("Ruth",))
    assert [k for k, _, _ in splits["train"]] == [("Gen", 1, 1), ("Rev", 1, 1)]
    assert [k for k, _, _ in splits["dev"]] == [("Acts", 1, 1)]
    assert [k for k, _, _ in splits["test"]] == [("Ruth", 1, 1), ("Ruth", 1, 2)]
    with pytest.raises(ValueError, match="both in dev and test"):
        bp.split_by_book(pairs, dev_books=("Ruth",), test_books=("Ruth",))
    with pytest.raises(ValueError, match="unknown books"):
        bp.split_by_book(pairs, dev_books=("Acts",), test_books=("Ruth", "Tobit"))
    # The committed split: held-out books with no parallel account in training.
    held_out = set(bp.DEV_BOOKS) | set(bp.TEST_BOOKS)
    assert not held_out & {"1Sam", "2Sam", "1Kgs", "2Kgs", "1Chr", "2Chr", "Matt", "Mark", "Luke"}
    assert not set(bp.DEV_BOOKS) & set(bp.TEST_BOOKS)


def test_align_lengths():
    assert bp.align_lengths([40, 80, 120], [37, 74, 110]) == [((0, 1), (0, 1)), ((1, 2), (1, 2)), ((2, 3), (2, 3))]
    assert bp.align_lengths([], []) == []
    assert bp.align_lengths([50], []) == [((0, 1), (0, 0))]
    assert bp.align_lengths([60, 60], [110]) == [((0, 2), (0, 1))]


def test_pair_verses_keeps_aligned_chapters_and_drops_the_others_whole():
    lengths = [60, 90, 40, 120, 70, 100, 50, 80]
    english = {("Num", 13, v + 1): "e" * n for v, n in enumerate(lengths)}
    spanish = {("Num", 13, v + 1): "s" * round(0.92 * n) for v, n in enumerate(lengths)}
    english.update({("Num", 12, 1): "e" * 50, ("Num", 12, 2): "e" * 60, ("Num", 11, 1): "e" * 70})
    spanish.update({("Num", 12, 1): "", ("Num", 12, 2): "s" * 55})  # Num 12:1 empty, Num 11:1 missing
    pairs, dropped = bp.pair_verses(english, spanish)
    assert [k for k, _, _ in pairs] == [("Num", 13, v) for v in range(1, 9)]
    assert pairs[0] == (("Num", 13, 1), "e" * 60, "s" * 55)
    assert dropped == {"only in one Bible": [("Num", 11, 1)], "empty on one side": [("Num", 12, 1)],
                       "in a chapter whose verse division differs": [("Num", 12, 2)]}

    # The Spanish divides verses 3-4 as one and the rest of the chapter shifts: its verse 3
    # holds the English 3 and 4, its verse 4 the English 5, ..., and its last verse is empty.
    # Verses 1 and 2 still match, but the whole chapter goes.
    shifted = {("Num", 13, v + 1): "s" * round(0.92 * n) for v, n in enumerate([60, 90, 160, 70, 100, 50, 80])}
    shifted[("Num", 13, 8)] = ""
    pairs, dropped = bp.pair_verses({k: v for k, v in english.items() if k[1] == 13}, shifted)
    assert pairs == []
    assert dropped == {"empty on one side": [("Num", 13, 8)],
                       "in a chapter whose verse division differs": [("Num", 13, v) for v in range(1, 8)]}

    # The same shift with nothing empty (the Spanish ends with a verse of the next chapter).
    moved = dict(shifted)
    moved[("Num", 13, 8)] = "s" * 74
    assert bp.pair_verses({k: v for k, v in english.items() if k[1] == 13}, moved)[0] == []


def test_tokens_and_ngram_overlap():
    assert bp.tokenize("And God said, Let there be light: \u00bfY fu\u00e9?") == [
        "and", "god", "said", ",", "let", "there", "be", "light", ":", "\u00bf", "y", "fu\u00e9", "?"]
    train = ["and it came to pass , when they were come in"]
    held_out = ["And it came to pass, when they were come, that", "short one"]
    # The first held-out sentence has 12 tokens, so 5 8-grams; the first 3 are in train. A
    # sentence shorter than 8 tokens has none.
    assert bp.ngram_overlap(held_out, train) == (3, 5)
    assert bp.ngram_overlap([], train) == (0, 0)


def test_missing_diatheke_or_module_is_one_error_line(tmp_path, monkeypatch, capsys):
    result = subprocess.run([sys.executable, SCRIPT, "--out_dir", str(tmp_path / "out")], capture_output=True,
                            text=True, env={"PATH": str(tmp_path)}, check=False)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "error: diatheke is not installed; install the SWORD packages with: "
        "apt-get install -y diatheke sword-text-kjv sword-text-sparv"]
    assert not (tmp_path / "out").exists()

    monkeypatch.setattr(bp.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(bp, "run_diatheke", lambda *args: "engKJV2006eb\nengWEB2015eb\n")
    with pytest.raises(SystemExit) as exit_info:
        bp.check_installed()
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: SWORD module spaRV1909eb not installed (package sword-text-sparv); install with: "
        "apt-get install -y diatheke sword-text-kjv sword-text-sparv"]
