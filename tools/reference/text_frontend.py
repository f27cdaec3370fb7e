"""Text frontends (spec section 3, text.frontend): text -> token ids 0..255.

"bytes": the UTF-8 bytes. "espeak-ipa": libespeak-ng's espeak_TextToPhonemes (IPA), called through
ctypes exactly as src/model/text_frontend.cpp calls it, then the IPA's UTF-8 bytes. Each clause is
followed by the punctuation mark that ended it in the text (. , ; : ! ?), clauses joined by one
space. The library is `libespeak-ng.so.1` (or $DRAMA_ESPEAK_LIB); its data is found through
$ESPEAK_DATA_PATH when set (a folder holding espeak-ng-data/, e.g. from `dpkg -x`)."""

import ctypes
import os
import threading

_lock = threading.Lock()  # espeak-ng keeps global state: one caller at a time
_state = {"lib": None, "language": None}

_MARKS = ".,;:!?"
_SPACES = " \t\n\r"
_CLOSING = "\"')]"
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_DONT_EXIT = 0x8000
_CHARS_UTF8 = 1
_PHONEMES_IPA = 0x02


def _library():
    if _state["lib"] is None:
        lib = ctypes.CDLL(os.environ.get("DRAMA_ESPEAK_LIB", "libespeak-ng.so.1"))
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
        lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                                              ctypes.c_int]
        if lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, None, _INITIALIZE_DONT_EXIT) <= 0:
            raise ValueError("espeak-ipa: libespeak-ng could not load its data (set ESPEAK_DATA_PATH)")
        _state["lib"] = lib
    return _state["lib"]


def _clause_mark(span, at_end):
    """The mark that ended a clause, from the bytes espeak-ng consumed for it (b"" if none); a
    trailing first character of the next clause (not space, mark or closing quote) is dropped."""
    n = len(span)
    if not at_end and n > 0 and chr(span[n - 1]) not in _SPACES + _MARKS + _CLOSING:
        n -= 1
        while n > 0 and (span[n] & 0xC0) == 0x80:
            n -= 1
    while n > 0 and chr(span[n - 1]) in _SPACES + _CLOSING:
        n -= 1
    return span[n - 1:n] if n > 0 and chr(span[n - 1]) in _MARKS else b""


def _is_safe(c):
    """Code points espeak-ng reads as en-us text without switching its translator (the engine's
    is_safe_code_point: other scripts reach a use-after-free in espeak-ng 1.51)."""
    c = ord(c)
    return c in (9, 10, 13) or 0x20 <= c <= 0x7E or 0xA0 <= c <= 0x24F or 0x2010 <= c <= 0x2027


MAX_WORD_BYTES = 64


def _split_long_words(text):
    """A space after every MAX_WORD_BYTES bytes of a run of non-space characters, at character
    boundaries (the engine's safe_text: espeak-ng 1.51 overflows a stack buffer on a long word
    after an abbreviation)."""
    out, word = [], 0
    for c in text:
        n = len(c.encode("utf-8"))
        space = c in " \t\n\r"
        if not space and word + n > MAX_WORD_BYTES:
            out.append(" ")
            word = 0
        out.append(c)
        word = 0 if space else word + n
    return "".join(out)


def espeak_ipa(text, language="en-us"):
    """The IPA string (UTF-8 bytes) of `text`, as the engine's espeak-ipa frontend makes it."""
    with _lock:
        lib = _library()
        if language != _state["language"]:
            if lib.espeak_SetVoiceByName(language.encode()) != 0:
                _state["language"] = None
                raise ValueError(f"text.language \"{language}\": espeak-ng has no such voice")
            _state["language"] = language
        text = text.split("\0")[0]  # espeak-ng reads a C string
        data = _split_long_words("".join(c if _is_safe(c) else " " for c in text)).encode("utf-8")
        buffer = ctypes.create_string_buffer(data)
        base = ctypes.addressof(buffer)
        cursor = ctypes.c_void_p(base)
        clauses = []
        while cursor.value is not None:
            before = cursor.value - base
            phonemes = lib.espeak_TextToPhonemes(ctypes.byref(cursor), _CHARS_UTF8, _PHONEMES_IPA)
            after = cursor.value - base if cursor.value is not None else len(data)
            clause = (phonemes or b"").strip(b" ")
            if clause:
                clause += _clause_mark(data[before:after], cursor.value is None)
                clauses.append(clause)
        # espeak-ng can keep the end of a text pending (it would open the next call's IPA): one
        # call on a lone space flushes it, its output discarded (as the engine does).
        flush_buffer = ctypes.create_string_buffer(b" ")
        flush = ctypes.c_void_p(ctypes.addressof(flush_buffer))
        while flush.value is not None:
            lib.espeak_TextToPhonemes(ctypes.byref(flush), _CHARS_UTF8, _PHONEMES_IPA)
        return b" ".join(clauses)


def text_tokens(text, frontend="bytes", language="en-us"):
    """Token ids (ints 0..255) of a text under a frontend."""
    if frontend == "bytes":
        return list(text.encode("utf-8"))
    if frontend == "espeak-ipa":
        return list(espeak_ipa(text, language))
    raise ValueError(f"text.frontend \"{frontend}\" is not supported")
