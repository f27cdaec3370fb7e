"""The corpus speakers: a synthesizer voice at one pitch and rate setting is one speaker.

Voices whose speech pocketsphinx follows (issue 14's measurements on 50 sentences): festival
cmu_us_slt_arctic_hts 8% WER, kal_diphone 12%, ked_diphone 12%; espeak-ng's Klatt variants
24-33%. espeak-ng's default voices (70-88%) are left out.

Festival has no portable pitch control across HTS and diphone voices, so a festival speaker's
pitch is moved by resampling (which moves the formants with it, as a different vocal tract
would): the utterance is synthesized `pitch` times slower (Duration_Stretch) and played `pitch`
times faster; `stretch` is the duration factor left after both. espeak-ng takes pitch (-p, 0-99) and rate (-s, words per minute) directly."""

FESTIVAL_VOICES = {"slt": "cmu_us_slt_arctic_hts", "kal": "kal_diphone", "ked": "ked_diphone"}
# (name suffix, pitch factor, duration stretch)
# x0.95 / x1.05: the first corpus's x0.9 / x1.1 (duration 1.08 / 0.93) cost pocketsphinx too much
# (kal-b 47%, slt-c 57% WER against 15-16% at x1; results/corpus-source-wer.json, the first corpus).
FESTIVAL_SETTINGS = [("a", 1.0, 1.0), ("b", 0.95, 1.04), ("c", 1.05, 0.965)]
ESPEAK_VARIANTS = ["klatt", "klatt2", "klatt3", "klatt4", "klatt5", "klatt6", "benjamin"]
# (name suffix, pitch 0-99, words per minute)
ESPEAK_SETTINGS = [("a", 40, 160), ("b", 65, 180)]


def all_speakers():
    """List of dicts: id, engine, voice, and the engine's settings; ordered, ids stable."""
    out = []
    for short, voice in FESTIVAL_VOICES.items():
        for suffix, pitch, stretch in FESTIVAL_SETTINGS:
            out.append({"id": f"festival-{short}-{suffix}", "engine": "festival", "voice": voice,
                        "pitch": pitch, "stretch": stretch})
    for variant in ESPEAK_VARIANTS:
        for suffix, pitch, rate in ESPEAK_SETTINGS:
            out.append({"id": f"espeak-{variant}-{suffix}", "engine": "espeak",
                        "voice": f"en-us+{variant}", "pitch": pitch, "rate": rate})
    return out


def by_id(ids=None):
    speakers = all_speakers()
    if not ids:
        return speakers
    known = {s["id"]: s for s in speakers}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise ValueError(f"unknown speakers {unknown}; known: {sorted(known)}")
    return [known[i] for i in ids]
