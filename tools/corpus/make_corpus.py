#!/usr/bin/env python3
"""Writes the tokenizer test corpus: tests/data/tokenizer_corpus.jsonl (one JSON string per line).

Deterministic (fixed seed, no input files). The text is made here from small word lists, syllable rules and
Unicode ranges, so it contains no third-party prose. It aims at the places where a byte-level BPE with o200k's
pre-tokenizer can go wrong: many scripts, letter case classes (Lu/Ll/Lt/Lm/Lo and marks), numbers of many
lengths and kinds, English contractions in mixed case, whitespace of every kind and length, code, JSON, emoji
sequences, special-token literals as plain text, very long pieces, and random code points.

    python3 tools/corpus/make_corpus.py [--out tests/data/tokenizer_corpus.jsonl] [--bytes 2600000]
"""
import argparse
import json
import random
import sys

WORDS = {
    "en": "the of and to in is you that it he was for on are as with his they at be this have from or one had "
          "by word but not what all were we when your can said there use an each which she do how their if will "
          "up other about out many then them these so some her would make like him into time has look two more "
          "write go see number no way could people my than first water been call who oil its now find long down "
          "day did get come made may part tokenizer encoder byte merge rank vocabulary".split(),
    "de": "der die und in den von zu das mit sich des auf für ist im dem nicht ein eine als auch es an werden aus "
          "er hat daß sie nach wird bei einer um am sind noch wie einem über einen so zum war haben nur oder aber "
          "vor zur bis mehr durch man Straße Größe Mädchen Übung Äpfel schön Fußgänger".split(),
    "fr": "le de un être et à il avoir ne je son que se qui ce dans en du elle au pour pas que vous par sur faire "
          "plus dire me on mon lui nous comme mais pouvoir avec tout y aller voir bien où sans tu ou leur homme "
          "déjà été très élève garçon français naïve cœur œuvre hôpital fenêtre".split(),
    "es": "el la de que y a en un ser se no haber por con su para como estar tener le lo todo pero más hacer o "
          "poder decir este ir otro ese si me ya ver porque dar cuando él muy sin vez mucho saber qué sobre "
          "año niño mañana corazón canción pingüino".split(),
    "vi": "không người một những có là của và được cho này với các đã trong khi để đến thì anh em chúng tôi "
          "nước Việt Nam tiếng học sinh thành phố Hà Nội đường ngày tháng năm".split(),
    "pl": "się nie że na jest to w z do jak co ale tak już jego przez był może być tylko gdy żeby było jeszcze "
          "źródło żółw łódź gęś świat Kraków Łódź Gdańsk".split(),
    "tr": "bir ve bu da için ne ile çok ama daha gibi sonra kadar olan her şey değil ben sen o biz siz onlar "
          "İstanbul ılık ışık çiçek öğrenci güneş".split(),
    "ru": "и в не на я быть он с что а по это она этот к но они мы как из у который то за свой что весь год от "
          "так о для ты же все тот мочь вы человек такой его сказать только или ещё бы себя один Москва "
          "государство объявление съёмка".split(),
    "uk": "і в не на що я з як це та він до але вона так ви ми його ще був їх її Київ Україна ґанок їжак "
          "європейський".split(),
    "el": "και το να του η της με που την από για τα είναι σε στο θα δεν ο στην των τον ένα μου οι στη "
          "Αθήνα ελληνικά ψυχή ΆΈΉ ΐ ΰ".split(),
    "ar": "في من على أن إلى التي الذي عن ما هذا مع كان هذه قد لا كل بين أو ثم حتى بعد إذا عند هو هي لم "
          "العربية مدرسة كتاب القاهرة مُحَمَّد السَّلَامُ عَلَيْكُمْ".split(),
    "he": "של את על לא זה הוא עם כי גם אני היא מה אבל או כל היה יש אם עוד רק אחד ירושלים עִבְרִית שָׁלוֹם".split(),
    "hi": "के है में की और को से का एक यह पर भी हैं था कि नहीं तो हो जो कर गया लिए ही साथ दिल्ली "
          "हिन्दी भारत क्षत्रिय ज्ञान".split(),
    "bn": "এবং একটি এই করে থেকে তার জন্য হয় না আমি তিনি বাংলা ঢাকা".split(),
    "ta": "ஒரு மற்றும் இந்த அது என்று தமிழ் சென்னை".split(),
    "ka": "და არის რომ ეს არ თუ მე ის საქართველო თბილისი".split(),
    "hy": "և է որ այս մի են նա ես Հայաստան Երևան".split(),
    "am": "እና ነው ላይ ውስጥ ይህ አዲስ አበባ ኢትዮጵያ".split(),
}

CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Re", "'rE", "'VE", "'vE", "'M",
                "'LL", "'Ll", "'lL", "'D", "'ſ", "’s", "’re", "ʼll", "''s", "'x", "'"]
EMOJI = ["😀", "😂", "🥹", "❤️", "💖", "👍", "🔥", "✨", "🎉", "🚀", "🧑‍💻", "👩‍🔬", "🏳️‍🌈", "🏴‍☠️",
         "👨‍👩‍👧‍👦", "👩‍❤️‍💋‍👨", "🫠", "🪿", "☕", "✔️", "➡️", "©️", "®", "™", "🀄", "🃏", "🇺🇸", "🇯🇵",
         "🇩🇪", "🇧🇷", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "1️⃣", "#️⃣", "*️⃣"]
SKIN_TONES = ["\U0001F3FB", "\U0001F3FC", "\U0001F3FD", "\U0001F3FE", "\U0001F3FF"]
TONE_BASES = ["👍", "👋", "🙏", "💪", "🤝", "👩", "🧑", "👶"]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\u2029", "\u0085", "\u000b",
          "\u000c", "\u2002", "\u2003", "\u2009", "\u200a", "\u202f", "\u205f", "\u1680", "\u180e", "\u200b",
          "\ufeff", "\u001c", "\u001f"]
SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>",
            "<|end|>", "<|message|>", "<|call|>", "<|endofprompt|>", "<|reserved_200000|>",
            "<|reserved_200018|>", "<|reserved_201087|>", "<|reserved_201088|>", "<|refusal|>", "<|", "|>",
            "<||>", "<|<|end|>", "<|end|>|>", "< |end| >", "<|END|>"]
TITLECASE = "ǅǈǋǲᾈᾉᾊᾋᾌᾍᾎᾏᾘᾙᾚᾛᾜᾝᾞᾟᾨᾩᾪᾫᾬᾭᾮᾯᾼῌῼ"
MODIFIERS = "ʰʱʲʳʴʵʶʷʸʹʺʻʼʽʾʿˀˁˆˇˈˉˊˋˌˍˎˏːˑˠˡˢˣˤᴬᴭᴮᴯᴰᴱᴲᴳᴴᵃᵇᵈᵉᵋᵐᵑ々ー〱〲ゝゞヽヾꜗꜘꜙ"
COMBINING = [chr(c) for c in range(0x300, 0x370)] + ["\u0483", "\u0591", "\u064b", "\u0651", "\u093c",
                                                     "\u0e31", "\u0e48", "\u20dd", "\u20e3", "\ufe0f", "\u200d"]
DIGIT_SETS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "০১২৩৪৫৬৭৮৯", "๐๑๒๓๔๕๖๗๘๙",
              "０１２３４５６７８９", "𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗", "⁰¹²³⁴⁵⁶⁷⁸⁹", "₀₁₂₃₄₅₆₇₈₉", "①②③④⑤⑥⑦⑧⑨",
              "ⅠⅡⅢⅣⅤⅥⅦⅧⅨⅩⅪⅫ", "½¼¾⅓⅔⅛", "〇一二三四五六七八九"]
PUNCT = list(".,;:!?-–—…()[]{}<>\"'«»„“”‘’‹›/\\|@#$%^&*_+=~`§¶†‡•′″‰※¡¿、。「」『』【】〈〉·")


def syllables(r, lo, hi, n):
    return "".join(chr(r.randint(lo, hi)) for _ in range(n))


def script_word(r, script):
    """A pseudo-word built from the script's letters (and marks), for scripts without a word list here."""
    if script == "cjk":
        return syllables(r, 0x4E00, 0x9FFF, r.randint(1, 12))
    if script == "kana":
        return syllables(r, 0x3041, 0x3096, r.randint(1, 6)) + syllables(r, 0x30A1, 0x30FA, r.randint(0, 5))
    if script == "hangul":
        return syllables(r, 0xAC00, 0xD7A3, r.randint(1, 5))
    if script == "thai":
        out = []
        for _ in range(r.randint(2, 9)):
            out.append(chr(r.randint(0x0E01, 0x0E2E)))
            if r.random() < 0.4:
                out.append(r.choice("\u0e31\u0e34\u0e35\u0e36\u0e37\u0e38\u0e39\u0e47\u0e48\u0e49\u0e4a\u0e4b"))
            if r.random() < 0.3:
                out.append(r.choice("\u0e32\u0e33\u0e40\u0e41\u0e42"))
        return "".join(out)
    if script == "devanagari":
        out = []
        for _ in range(r.randint(1, 5)):
            out.append(chr(r.randint(0x0915, 0x0939)))
            if r.random() < 0.6:
                out.append(chr(r.choice([0x093E, 0x093F, 0x0940, 0x0941, 0x0942, 0x0947, 0x0948, 0x094B, 0x094D,
                                         0x0902, 0x0901])))
        return "".join(out)
    if script == "hangul_jamo":
        return syllables(r, 0x1100, 0x1112, 1) + syllables(r, 0x1161, 0x1175, 1) + syllables(r, 0x11A8, 0x11C2, 1)
    raise ValueError(script)


def sentence(r, lang):
    if lang in WORDS:
        words = [r.choice(WORDS[lang]) for _ in range(r.randint(3, 18))]
    else:
        words = [script_word(r, lang) for _ in range(r.randint(2, 12))]
    if r.random() < 0.7 and words[0][:1].isalpha():
        words[0] = words[0][:1].upper() + words[0][1:]
    for i in range(len(words)):
        x = r.random()
        if x < 0.05:
            words[i] = words[i].upper()
        elif x < 0.08:
            words[i] += r.choice(",;:")
        elif x < 0.10:
            words[i] = str(r.randint(0, 10 ** r.randint(1, 6)))
    sep = "" if lang in ("cjk", "kana", "thai") and r.random() < 0.7 else " "
    end = r.choice(["。", "！", "？"]) if lang in ("cjk", "kana") else r.choice([".", ".", "!", "?", "…", "؟", "।"])
    return sep.join(words) + end


def doc_natural(r):
    lang = r.choice(list(WORDS) + ["cjk", "kana", "hangul", "thai", "devanagari", "hangul_jamo"])
    paras = []
    for _ in range(r.randint(1, 6)):
        paras.append(" ".join(sentence(r, lang) for _ in range(r.randint(1, 8))))
    return r.choice(["\n\n", "\n", "\r\n\r\n", " "]).join(paras)


def doc_mixed_scripts(r):
    langs = list(WORDS) + ["cjk", "kana", "hangul", "thai", "devanagari"]
    return " ".join(sentence(r, r.choice(langs)) for _ in range(r.randint(3, 20)))


def doc_contractions(r):
    out = []
    for _ in range(r.randint(20, 120)):
        w = r.choice(WORDS["en"] + ["I", "you", "THEY", "We", "it", "John", "O", "x", "rock", "n"])
        x = r.random()
        if x < 0.3:
            w = w.upper()
        elif x < 0.5:
            w = w.capitalize()
        elif x < 0.55:
            w = r.choice(TITLECASE) + w
        elif x < 0.6:
            w = w + r.choice(MODIFIERS)
        out.append(w + r.choice(CONTRACTIONS) + r.choice(["", "", "s", "t", "re", "x", "'s", "ll"]))
    return r.choice([" ", " ", "\n", ", "]).join(out)


def doc_letter_classes(r):
    pool = (list(TITLECASE) + list(MODIFIERS) + COMBINING + list("abcXYZ ſßÆæŒœĲĳ") + list("AaBb") +
            ["'", "'s", "'S", "'LL", " ", "\n", "1", "23", "!", "ǅA", "Aǅ", "aǅ"])
    return "".join(r.choice(pool) for _ in range(r.randint(50, 400)))


def doc_zalgo(r):
    out = []
    for _ in range(r.randint(10, 80)):
        base = r.choice("aeiouxyzAEIOU ‍1!é中한ก" + TITLECASE[:3])
        out.append(base + "".join(r.choice(COMBINING) for _ in range(r.randint(0, 12))))
    return "".join(out)


def doc_numbers(r):
    out = []
    for _ in range(r.randint(20, 150)):
        x = r.random()
        if x < 0.35:
            n = r.randint(1, 40)
            out.append("".join(r.choice("0123456789") for _ in range(n)))
        elif x < 0.5:
            out.append(f"{r.uniform(-1e6, 1e6):.{r.randint(0, 9)}f}")
        elif x < 0.6:
            out.append(f"{r.randint(0, 10**12):,}")
        elif x < 0.65:
            out.append(f"{r.uniform(-1, 1) * 10 ** r.randint(-30, 30):e}")
        elif x < 0.7:
            out.append(hex(r.getrandbits(r.randint(4, 128))))
        elif x < 0.75:
            out.append(f"{r.randint(1900, 2100)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}T"
                       f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}Z")
        elif x < 0.8:
            out.append(f"v{r.randint(0, 20)}.{r.randint(0, 99)}.{r.randint(0, 999)}")
        else:
            ds = r.choice(DIGIT_SETS)
            out.append("".join(r.choice(ds) for _ in range(r.randint(1, 12))))
        out.append(r.choice([" ", " ", ", ", "\n", "+", "*", "x", "abc", "%", "$", "€", "₹", "-"]))
    return "".join(out)


def doc_whitespace(r):
    out = []
    for _ in range(r.randint(20, 150)):
        x = r.random()
        if x < 0.4:
            out.append(r.choice(WORDS["en"] + WORDS["ru"] + ["x", "Ab", "123", "!!", "中文", "'s"]))
        elif x < 0.7:
            out.append("".join(r.choice(SPACES) for _ in range(r.randint(1, 8))))
        elif x < 0.85:
            out.append(r.choice(SPACES) * r.randint(2, 200))
        else:
            out.append(r.choice([" /", "/\n", "!\r\n", ".\n\n\n", ";\r\r", "//\n/", " \n ", "\t\n\t", "\n \n"]))
    if r.random() < 0.5:
        out.append(r.choice(SPACES) * r.randint(1, 5))
    if r.random() < 0.3:
        out.insert(0, r.choice(SPACES) * r.randint(1, 5))
    return "".join(out)


def ident(r):
    base = r.choice(["value", "count", "i", "idx", "buffer", "tokenIds", "max_len", "HTTPServer", "xs", "_tmp",
                     "résumé", "данные", "数据", "self", "ctx", "kMaxSize", "__init__"])
    return base + (str(r.randint(0, 99)) if r.random() < 0.2 else "")


def doc_code(r):
    lang = r.choice(["py", "cpp", "js", "rust", "go", "sh", "sql"])
    ind = r.choice(["    ", "  ", "\t"])
    lines = []
    for _ in range(r.randint(8, 60)):
        depth = r.randint(0, 4)
        a, b = ident(r), ident(r)
        x = r.random()
        if lang == "py":
            choices = [f"def {a}({b}, *args, **kwargs) -> dict[str, int]:", f"{a} = [{b} ** 2 for {b} in range({r.randint(0, 1000)})]",
                       f"if {a} is not None and {b} != '{r.choice(WORDS['en'])}':", f"return f\"{{{a}!r}} -> {{{b}:>10}}\"",
                       f"# {sentence(r, 'en')}", f"raise ValueError(f'bad {a}: {{{b}}}')", "\"\"\"Docstring.\"\"\"",
                       f"{a}: Optional[List[int]] = None", f"print({a}, end='\\n')", "pass"]
        elif lang == "cpp":
            choices = [f"std::vector<int32_t> {a}({b}.size());", f"for (size_t {a} = 0; {a} < {b}; ++{a}) {{",
                       "}", f"// {sentence(r, 'en')}", f"#include <{r.choice(['vector', 'string_view', 'cstdint'])}>",
                       f"template <typename T> T {a}(const T& {b}) noexcept {{ return {b} << 2; }}",
                       f"if ({a} != nullptr && {b}->{a}[{r.randint(0, 9)}] >= 0x{r.getrandbits(16):04X}) return;",
                       f"/* {sentence(r, 'de')} */", f"auto {a} = std::make_unique<{b}>();", f"{a} += {b} / 3.0f;"]
        elif lang == "js":
            choices = [f"const {a} = async ({b}) => {{", f"  await fetch(`/api/${{{b}}}`);", "});",
                       f"let {a} = {b}?.map(x => x * 2) ?? [];", f"// {sentence(r, 'fr')}", f"export default {a};",
                       f"{a} === {b} && console.log('{r.choice(EMOJI)}');", f"const re = /^[a-z]+\\d{{2,3}}$/gi;"]
        elif lang == "rust":
            choices = [f"fn {a}<'a>(x: &'a str) -> Result<Vec<u8>, Error> {{", f"let mut {a}: HashMap<u32, String> = HashMap::new();",
                       f"match {a} {{ Some(v) => v, None => return Err(e), }}", f"/// {sentence(r, 'en')}",
                       "#[derive(Debug, Clone, PartialEq)]", f"impl<T: Copy> {b}<T> for {a} {{", "}"]
        elif lang == "go":
            choices = [f"func ({a} *{b}) Run(ctx context.Context) error {{", f"if err != nil {{ return fmt.Errorf(\"{a}: %w\", err) }}",
                       f"{a} := make([]byte, 0, {r.randint(1, 4096)})", f"// {sentence(r, 'en')}", "}"]
        elif lang == "sh":
            choices = [f"for f in ./*.{r.choice(['txt', 'json', 'cc'])}; do echo \"$f\"; done", f"export {a.upper()}=\"${{HOME}}/.{b}\"",
                       "set -euo pipefail", f"grep -rn '{a}' src/ | wc -l", f"[ -d /tmp/{b} ] || mkdir -p /tmp/{b}", "fi"]
        else:
            choices = [f"SELECT {a}, COUNT(*) FROM {b} WHERE {a} > {r.randint(0, 999)} GROUP BY 1;",
                       f"INSERT INTO {b} VALUES ('{r.choice(WORDS['es'])}', {r.random():.3f});", f"-- {sentence(r, 'en')}"]
        lines.append(ind * depth + r.choice(choices) + (" " * r.randint(1, 3) if x < 0.05 else ""))
    return r.choice(["\n", "\n", "\r\n"]).join(lines) + ("\n" if r.random() < 0.7 else "")


def rand_json_value(r, depth):
    x = r.random()
    if depth > 3 or x < 0.35:
        y = r.random()
        if y < 0.3:
            return r.randint(-10**r.randint(1, 18), 10**r.randint(1, 18))
        if y < 0.45:
            return r.uniform(-1e9, 1e9)
        if y < 0.55:
            return r.choice([True, False, None])
        lang = r.choice(list(WORDS))
        return " ".join(r.choice(WORDS[lang]) for _ in range(r.randint(0, 6))) + r.choice(["", "\n", "\t", "\"q\"", "\\", r.choice(EMOJI)])
    if x < 0.65:
        return [rand_json_value(r, depth + 1) for _ in range(r.randint(0, 6))]
    return {ident(r) + r.choice(["", "_id", "Name", "-x"]): rand_json_value(r, depth + 1) for _ in range(r.randint(0, 7))}


def doc_json(r):
    v = {ident(r): rand_json_value(r, 0) for _ in range(r.randint(1, 8))}
    style = r.random()
    if style < 0.4:
        return json.dumps(v, ensure_ascii=False, indent=r.choice([2, 4, "\t"]))
    if style < 0.7:
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(v, ensure_ascii=True)


def doc_emoji(r):
    out = []
    for _ in range(r.randint(10, 120)):
        x = r.random()
        if x < 0.5:
            out.append(r.choice(EMOJI))
        elif x < 0.7:
            out.append(r.choice(TONE_BASES) + r.choice(SKIN_TONES))
        elif x < 0.8:
            out.append(r.choice(TONE_BASES) + r.choice(SKIN_TONES) + "\u200d" + r.choice(["💻", "🔬", "🚀", "🦰", "🦳"]))
        elif x < 0.9:
            out.append(chr(r.randint(0x1F1E6, 0x1F1FF)) + chr(r.randint(0x1F1E6, 0x1F1FF)))
        else:
            out.append(chr(r.randint(0x1F300, 0x1FAFF)))
        out.append(r.choice(["", "", " ", " ", "!", "\n", r.choice(WORDS["en"]) + " "]))
    return "".join(out)


def doc_markup(r):
    out = []
    for _ in range(r.randint(5, 40)):
        w = r.choice(WORDS["en"])
        out.append(r.choice([
            f"# {sentence(r, 'en')}\n", f"- **{w}**: `{ident(r)}()`\n", f"> {sentence(r, 'en')}\n",
            f"[{w}](https://example.com/{w}/{r.randint(0, 999)}?q={w}&lang=en#sec-{r.randint(1, 9)})",
            f"<div class=\"{w}\" data-id='{r.randint(0, 99)}'>{sentence(r, 'fr')}</div>\n",
            f"{w}.{r.choice(['user', 'admin'])}@{r.choice(['example.org', 'müller.de', 'пример.рф'])}",
            f"C:\\Users\\{w}\\AppData\\Local\\{ident(r)}.dll ", f"/usr/local/lib/{w}/{ident(r)}.so.{r.randint(1, 9)} ",
            f"sha256:{r.getrandbits(256):064x} ", "".join(r.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(r.randint(20, 120))) + "== ",
            "| a | b |\n|---|:-:|\n| 1 | 2 |\n", "```python\nprint('hi')\n```\n", "$$\\frac{a}{b} = \\sum_{i=0}^{n} x_i^2$$ ",
            r.choice(PUNCT) * r.randint(1, 30), "----\n", "***", "=== " + w.upper() + " ===\n",
        ]))
    return "".join(out)


def doc_specials(r):
    out = []
    for _ in range(r.randint(5, 40)):
        x = r.random()
        if x < 0.4:
            out.append(r.choice(SPECIALS))
        elif x < 0.55:
            out.append(f"<|reserved_{r.randint(199990, 201100)}|>")
        elif x < 0.7:
            role = r.choice(["system", "user", "assistant", "developer", "functions.get_weather"])
            out.append(f"<|start|>{role}<|channel|>{r.choice(['analysis', 'final', 'commentary'])}<|message|>"
                       f"{sentence(r, 'en')}<|end|>")
        else:
            out.append(sentence(r, r.choice(["en", "de", "ru"])))
        out.append(r.choice(["", " ", "\n", "x"]))
    return "".join(out)


def valid_scalar(r):
    while True:
        c = r.randint(0, 0x10FFFF)
        if not 0xD800 <= c <= 0xDFFF:
            return chr(c)


BLOCKS = [(0x0000, 0x024F), (0x0250, 0x036F), (0x0370, 0x052F), (0x0530, 0x08FF), (0x0900, 0x0DFF),
          (0x0E00, 0x0FFF), (0x1000, 0x1FFF), (0x2000, 0x2BFF), (0x2C00, 0x2FFF), (0x3000, 0x33FF),
          (0x3400, 0x4DBF), (0xA000, 0xABFF), (0xF900, 0xFFFF), (0x10000, 0x1214F), (0x16800, 0x18D08),
          (0x1B000, 0x1BCFF), (0x1D000, 0x1DFFF), (0x1E000, 0x1EFFF), (0x1F000, 0x1FAFF), (0x20000, 0x323AF),
          (0xE0000, 0xE01EF)]


def doc_random_codepoints(r):
    out = []
    mode = r.random()
    for _ in range(r.randint(20, 300)):
        if mode < 0.3:
            out.append(valid_scalar(r))
        else:
            lo, hi = r.choice(BLOCKS)
            c = r.randint(lo, hi)
            out.append(chr(c) if not 0xD800 <= c <= 0xDFFF else "?")
        if r.random() < 0.3:
            out.append(r.choice([" ", "a", "A", "1", "'s", "\n", "!", "  "]))
    return "".join(out)


def doc_long_pieces(r):
    x = r.random()
    if x < 0.2:
        return syllables(r, 0x4E00, 0x9FFF, r.randint(500, 3000))
    if x < 0.35:
        return r.choice("aAxz") * r.randint(200, 4000)
    if x < 0.5:
        return "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(300, 3000)))
    if x < 0.6:
        return r.choice(["=", "-", "*", "#", "!?", ".", "/"]) * r.randint(100, 3000)
    if x < 0.7:
        return " " * r.randint(100, 5000) + r.choice(["", "x", "\n"])
    if x < 0.8:
        return "".join(r.choice("0123456789") for _ in range(r.randint(100, 3000)))
    if x < 0.9:
        return script_word(r, "thai") * r.randint(20, 200)
    return "".join(r.choice(EMOJI) for _ in range(r.randint(50, 500)))


KINDS = [
    (doc_natural, 30), (doc_mixed_scripts, 8), (doc_contractions, 6), (doc_letter_classes, 4), (doc_zalgo, 2),
    (doc_numbers, 6), (doc_whitespace, 8), (doc_code, 12), (doc_json, 8), (doc_emoji, 5), (doc_markup, 5),
    (doc_specials, 4), (doc_random_codepoints, 6), (doc_long_pieces, 2),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/data/tokenizer_corpus.jsonl")
    ap.add_argument("--bytes", type=int, default=2_600_000, help="stop after this many UTF-8 bytes of text")
    ap.add_argument("--seed", type=int, default=20250805)
    args = ap.parse_args()
    r = random.Random(args.seed)
    funcs = [f for f, w in KINDS for _ in range(w)]
    docs, total = [], 0
    while total < args.bytes:
        d = r.choice(funcs)(r)
        docs.append(d)
        total += len(d.encode("utf-8"))
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}: {len(docs)} documents, {total} bytes of text", file=sys.stderr)


if __name__ == "__main__":
    main()
