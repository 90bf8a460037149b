"""Known public files whose rows repeat answers, recognised by their bytes (SHA-256).

The DKVMN-format and DKT-CSV copies of ASSISTments 2009 keep a problem tagged
with several skills as one row per skill, the response copied, and carry no
problem ids: the converters cannot merge those rows. The DKVMN copy still
shows the pattern (consecutive rows of co-tagged skills, copied responses;
`ktstream.leakage.expansion.copied_answer_rows` finds 14.8% of its test rows);
the DKT-CSV copy orders each learner's rows by skill, which hides it, so only
its fingerprint tells. A figure computed on any of these files is on rows as
given, not on problems.

>>> known_repeated_answers(Path(__file__))  # any other file: None
"""

from __future__ import annotations

import hashlib
from pathlib import Path

ASSIST2009_DKVMN = ("ASSISTments 2009, DKVMN-format copy (assist2009_updated): multi-skill problems repeated as "
                    "consecutive rows with copied responses, no problem ids")
ASSIST2009_DKT = ("ASSISTments 2009, DKT-CSV copy (builder): multi-skill problems repeated as rows with copied "
                  "responses, rows ordered by skill, no problem ids")

KNOWN: dict[str, str] = {
    "2e8f1d7600543aededa31323343f7d762b8f51c53c0caca852e813b67fe4e823": ASSIST2009_DKVMN,  # _test
    "5b851c65f665474a0993d86e87901adb1e0916c0d80fe7fce4096e6641924c74": ASSIST2009_DKVMN,  # _train
    "3816a773851dd0a727322cf9396fd14a652c3a3ff07e71a56ae2ea43f4164201": ASSIST2009_DKVMN,  # _train1
    "9bc46dccd674657d730f22869da3ce7667a57c34e1c511067d6bc7f4c865bea9": ASSIST2009_DKVMN,  # _train2
    "78d66030acf16a75031d93be77e247370d6d764bc40794f8d0a40a762568aa0b": ASSIST2009_DKVMN,  # _train3
    "37b7c55f68965aac0a8e9434fc39cca137d376a18c5839ce6b368612dbabccad": ASSIST2009_DKVMN,  # _train4
    "7c5c1e8f82ecd5b90522d4a544f81810bd0b5629a9f0fb75848a219c09d78d33": ASSIST2009_DKVMN,  # _train5
    "e4fff52e91a4b140207de7590e7bc131efa595f42fdfb3983729bc3faa5b5262": ASSIST2009_DKVMN,  # _valid1
    "f9abe32803603d8bd1f7df7275d7327462f205ee0ff29ae558a35e69e246f3dc": ASSIST2009_DKVMN,  # _valid2
    "275e96b63290dd9c47ca224ec7c089385041fbec8a66918631729907025da323": ASSIST2009_DKVMN,  # _valid3
    "4b3c59ca825eb0ebac2039efaec1722e2c93b6c4a5cab1bc3554cffec597369f": ASSIST2009_DKVMN,  # _valid4
    "14923acd4ca909d0359dbecdf4322adbe49c645453ba1405eed864a454baa001": ASSIST2009_DKVMN,  # _valid5
    "b50d81ef734e1e159ccf7976ffa5000674635c145eda4f78ba4cacaf374a61c0": ASSIST2009_DKT,  # builder_test
    "bfae3e91ff4f0eb59bb12862872cbddcacd19bccad472c60ef0bdf7d7eb963d1": ASSIST2009_DKT,  # builder_train
}


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def known_repeated_answers(path: Path) -> str | None:
    """What is known about ``path``'s repeated answers, or None for a file not in the table."""
    return KNOWN.get(sha256_of(path))
