"""Which listed model to probe: a ``/v1/models`` entry that can generate text.

``cannot_generate`` tells an embedding, reranking, speech, image or moderation model
from its metadata or the words of its id (``NON_GENERATIVE``); ``pick_model`` takes
the first listed model that can generate, noting the ones passed over.  Used by
discovery (``server.discover``) and when a refused model is swapped
(``probe_kinds.try_other_models``).
"""

from __future__ import annotations

import re

from prefilltui.model.types import ServerInfo


#: Words in a model id, or values of its ``type``/``task``/``mode``/``model_type``
#: metadata (Together, LM Studio, LiteLLM, Infinity), that name a model which
#: cannot generate text: embedding, reranking, speech, image and moderation models.
NON_GENERATIVE = ("embed", "embedding", "embeddings", "rerank", "reranker", "reranking",
                  "classify", "classification", "score", "moderation", "whisper",
                  "transcription", "transcribe", "tts", "speech", "audio", "image", "dall-e",
                  "clip", "bge", "e5", "gte", "colbert", "splade", "sentence-transformers",
                  "minilm", "mpnet", "realtime", "diffusion", "sora", "veo", "imagen", "flux",
                  "kokoro", "voyage", "ocr", "bark", "diarization", "siglip", "dinov2",
                  "stella", "colpali", "colqwen")
#: Stems that mark such a model wherever they stand in its id, glued to other words
#: too ("embeddinggemma-300m", "nv-embedqa", "mxbai-rerank", "dall-e-3").
NON_GENERATIVE_STEMS = ("embed", "rerank", "dall-e", "whisper", "moderation", "transcri",
                        "diffusion", "colbert", "colpali", "colqwen")
_WORD = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def cannot_generate(m: dict) -> str | None:
    """Why a /v1/models entry cannot generate text ("embedding model", ...), or None.

    Metadata first (``type``, ``task``, ``mode``, ``model_type``, ``capabilities``),
    then the id's words (``NON_GENERATIVE``: "text-embedding-3-small",
    "bge-reranker-v2-m3", "whisper-1")."""
    for k in ("type", "task", "mode", "model_type"):
        v = m.get(k)
        if isinstance(v, str) and v and v.lower() not in ("llm", "vlm", "chat", "completion",
                                                          "completions", "language", "text",
                                                          "generate", "code", "model"):
            if any(w in v.lower() for w in NON_GENERATIVE):
                return f"{v.lower()} model ({k})"
    caps = m.get("capabilities")
    if isinstance(caps, dict) and caps and not any(
            caps.get(k) for k in ("completion", "completions", "chat", "chat_completion",
                                  "generate", "text_generation")) and any(caps.values()):
        return "no text generation (capabilities)"
    mid = str(m.get("id") or "").lower()
    words = set(_WORD.findall(mid.rsplit("/", 1)[-1])) | set(
        w for part in _WORD.findall(mid) for w in part.split("-"))
    hit = next((w for w in NON_GENERATIVE if w in words), None) or next(
        (w for w in NON_GENERATIVE_STEMS if w in mid), None)
    return f"{hit} model (name)" if hit else None


def pick_model(entries: list[dict], info: ServerInfo) -> dict:
    """The first listed model that can generate text (``cannot_generate``); notes in
    ``info.notes`` which were passed over.  When none can, the first entry, noted."""
    skipped = [(str(m.get("id")), why) for m in entries if (why := cannot_generate(m))]
    chosen = next((m for m in entries if not cannot_generate(m)), None)
    if chosen is None:
        info.notes.append(
            "every model the server lists looks unable to generate text ("
            + ", ".join(f"{i}: {w}" for i, w in skipped[:6])
            + f"); probing {entries[0].get('id')!s} anyway: pass --model NAME to choose")
        return entries[0]
    if skipped:
        info.notes.append(
            f"{len(entries)} models listed; probing {chosen.get('id')!s}, passed over "
            + ", ".join(f"{i} ({w})" for i, w in skipped[:6])
            + ": they cannot generate text; pass --model NAME to choose another")
    return chosen
