"""The real GGUF model through llama.cpp: fidelity, normalisation, awkward input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from appliance.core.config import load_settings
from appliance.memory.embedder import Embedder, clean_text, fastest_form, load_cpu_backend
from appliance.memory.errors import EmptyText, ModelLoadFailed, ModelMissing
from tests.support.processes import base_environ

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "minilm-reference.json"


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_dimension_is_read_from_the_model(embedder: Embedder) -> None:
    assert embedder.dimension == 384
    assert embedder.context_tokens == 512


@pytest.mark.parametrize("index", [0, 1, 2])
def test_matches_sentence_transformers_reference(embedder: Embedder, index: int) -> None:
    fixture = json.loads(FIXTURE.read_text())
    reference = np.asarray(fixture["embeddings"][index], dtype=np.float32)
    vector = embedder.embed(fixture["texts"][index])
    assert cosine(vector, reference) >= 0.999


@pytest.mark.parametrize(
    "text",
    ["Where does the owner keep the spare key?", "Pressure distribution on a slender cone."],
)
def test_matches_an_independent_numpy_forward_pass(embedder: Embedder, text: str) -> None:
    from build.model import package_model_dir
    from build.reference_embed import reference_embed

    reference = reference_embed(package_model_dir(), text)
    assert cosine(embedder.embed(text), reference) >= 0.999


@pytest.mark.parametrize(
    "text", ["short", "A longer sentence about a garden.", "x" * 5000, "ünïcödé ✓ 数据"]
)
def test_embeddings_are_unit_length_float32(embedder: Embedder, text: str) -> None:
    vector = embedder.embed(text)
    assert vector.dtype == np.float32
    assert vector.shape == (384,)
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


@pytest.mark.parametrize("text", ["", "   ", "\n\t", b"", "\x00\x00"])
def test_empty_text_is_a_clear_error(embedder: Embedder, text: str | bytes) -> None:
    with pytest.raises(EmptyText, match="no text to embed"):
        embedder.embed(text)


def test_a_200_kb_text_is_truncated_not_rejected(embedder: Embedder) -> None:
    sentence = "The boundary layer thickens downstream of the leading edge. "
    huge = sentence * (200_000 // len(sentence) + 1)
    assert len(huge) >= 200_000
    vector = embedder.embed(huge)
    assert vector.shape == (384,)
    # Documented: the text is cut to max_chars first, so only that prefix matters.
    assert cosine(vector, embedder.embed(huge[: embedder.max_chars])) > 0.99999


def test_no_context_holds_logits_an_embedding_never_writes(embedder: Embedder) -> None:
    """The wheel's llama.cpp reserves no logits for an embedding context (build/llama-wheel.sh):
    otherwise a row of the whole vocabulary per token, zeroed, 30-62 MB resident per context."""
    import llama_cpp

    long_text = "The boundary layer thickens downstream of the leading edge. " * 60
    embedder.embed(long_text)  # 512 tokens: the largest output a context reserves
    embedder.embed_many([long_text, "a short one", "another short one"])
    contexts = [*embedder._bulk, embedder._query]
    assert len(contexts) >= 2
    for context in contexts:
        assert not llama_cpp.llama_get_logits(context.context.ctx)


def test_the_cpu_backend_computes_gelu_to_float_precision(embedder: Embedder) -> None:
    """build/ggml-simd.patch: the loaded CPU variant computes GELU a vector at a time to float
    precision, where ggml looked up each value in a table after rounding it to half precision
    (an error of up to ~1e-3 of the value)."""
    import ctypes

    maps = Path("/proc/self/maps").read_text().split()
    (library,) = {Path(word) for word in maps if Path(word).name.startswith("libggml-cpu-")}
    gelu = ctypes.CDLL(str(library)).ggml_vec_gelu_f32  # a function of its own since the patch
    x = np.linspace(-12.0, 12.0, 4096, dtype=np.float32)  # whole vectors on every variant
    y = np.empty_like(x)
    gelu.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    gelu(x.size, y.ctypes.data, x.ctypes.data)
    wide = x.astype(np.float64)
    tanh_form = 0.5 * wide * (1 + np.tanh(np.sqrt(2 / np.pi) * (wide + 0.044715 * wide**3)))
    assert np.max(np.abs(y - tanh_form) / np.maximum(1.0, np.abs(tanh_form))) < 1e-5


@pytest.mark.parametrize(
    ("raw", "cleaned"),
    [
        ("abc\ud800def", "abc?def"),  # a lone surrogate cannot be UTF-8
        (b"caf\xc3\xa9 \xff\xfe ok", "café \ufffd\ufffd ok"),  # invalid UTF-8 bytes
        ("nul\x00byte", "nul byte"),
        ("bell\x07 and tab\tand\nnewline", "bell  and tab\tand\nnewline"),
    ],
)
def test_non_utf8_safe_input_is_cleaned_and_embedded(
    embedder: Embedder, raw: str | bytes, cleaned: str
) -> None:
    assert clean_text(raw, 8000) == cleaned
    vector = embedder.embed(raw)
    assert cosine(vector, embedder.embed(cleaned)) > 0.99999


def test_embed_many_equals_one_at_a_time(embedder: Embedder) -> None:
    texts = ["first text", "second, different text", "third"]
    for many, one in zip(embedder.embed_many(texts), texts, strict=True):
        assert cosine(many, embedder.embed(one)) > 0.99999


def test_a_search_query_on_half_the_cores_embeds_as_on_every_core(embedder: Embedder) -> None:
    """A search's query runs on the query threads (beside Neo4j), a lone text on every core:
    the same vector either way, and each call sets its own thread count."""
    for text in ["spare key", "Pressure distribution on a slender cone at Mach 2."]:
        shared = embedder.embed(text, shared_cpu=True)
        assert embedder._query._threads == embedder.query_threads
        alone = embedder.embed(text)
        assert embedder._query._threads == embedder.bulk_threads
        assert cosine(shared, alone) > 0.99999


def test_similar_texts_are_closer_than_unrelated_ones(embedder: Embedder) -> None:
    a = embedder.embed("My sister's birthday is on the 3rd of May.")
    b = embedder.embed("When is my sister's birthday?")
    c = embedder.embed("Supersonic flow over a swept wing.")
    assert cosine(a, b) > cosine(a, c) + 0.2


def test_missing_model_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(ModelMissing, match="just model"):
        Embedder(tmp_path / "absent.gguf")


def test_corrupt_model_is_a_load_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(ModelLoadFailed, match="could not load"):
        Embedder(bad)


def _best_variant_here() -> str:
    """The feature that marks the best of build/llama-wheel.sh's variants this CPU runs."""
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith(("flags", "Features")):
            flags |= set(line.partition(":")[2].split())
    if {"avx512f", "avx512bw", "avx512vbmi", "avx512_vnni", "avx512_bf16"} <= flags:
        return "AVX512_BF16"  # zen4
    if {"avx512f", "avx512bw", "avx512vbmi", "avx512_vnni"} <= flags:
        return "AVX512_VNNI"  # icelake
    if "avx_vnni" in flags:
        return "AVX_VNNI"  # alderlake
    if {"asimddp", "asimdhp"} <= flags:
        return "DOTPROD"  # armv8.2_2
    return "AVX2" if "avx2" in flags else "NEON"  # haswell, armv8.0_1


def test_the_cpu_backend_is_the_best_variant_this_processor_runs(embedder: Embedder) -> None:
    """The wheel carries llama.cpp's CPU code for several processor generations; ggml picks the
    best this one runs, and the embedder says which in its load line."""
    features = embedder.cpu_features.split()
    assert _best_variant_here() in features
    if "avx512f" not in Path("/proc/cpuinfo").read_text():
        assert "AVX512" not in features


# The development model's f16 file, where bootstrap puts it beside its bf16 and q8_0 forms.
F16 = load_settings(base_environ()).embed_model_path


def test_the_bf16_form_is_loaded_where_the_cpu_multiplies_bf16(
    model_path: Path, tmp_path: Path
) -> None:
    """Beside the f16 file, its bf16 form (build/model.py makes both): the engine's default on a
    CPU whose backend has AVX512_BF16, and nowhere else; a file of another form is kept."""
    bf16 = F16.with_name("all-minilm-l6-v2.bf16.gguf")
    assert bf16.is_file(), f"{bf16} is missing: run `just bootstrap`"
    native = "AVX512_BF16" in load_cpu_backend().split()
    assert fastest_form(F16) == model_path == (bf16 if native else F16)
    alone = tmp_path / F16.name
    alone.write_bytes(b"")  # no bf16 file beside it
    assert fastest_form(alone) == alone
    q8 = F16.with_name("all-minilm-l6-v2.q8_0.gguf")
    assert fastest_form(q8) == q8
    assert fastest_form(bf16) == bf16


def test_the_bf16_form_embeds_as_the_f16_one_does() -> None:
    """bf16 weights (f32's range, 7 bits of mantissa) give the same vectors as f16's, on the
    variant this CPU loads (AVX512_BF16's own products, or the others' conversion)."""
    f16 = Embedder(F16)
    bf16 = Embedder(F16.with_name("all-minilm-l6-v2.bf16.gguf"))
    try:
        fixture = json.loads(FIXTURE.read_text())
        texts = [*fixture["texts"], "Pressure distribution on a slender cone at incidence."]
        for text, a, b in zip(texts, f16.embed_many(texts), bf16.embed_many(texts), strict=True):
            assert cosine(a, b) >= 0.9999, text
        for index, text in enumerate(fixture["texts"]):
            reference = np.asarray(fixture["embeddings"][index], dtype=np.float32)
            assert cosine(bf16.embed(text), reference) >= 0.999
        assert bf16.model_name == "all-minilm-l6-v2.bf16"
    finally:
        f16.close()
        bf16.close()


def test_the_load_line_names_the_cpu_features(
    model_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("INFO", logger="appliance.memory.embedder"):
        model = Embedder(model_path)
    model.close()
    (line,) = [r.getMessage() for r in caplog.records if "op=load" in r.getMessage()]
    assert model.cpu_features and f"cpu='{model.cpu_features}'" in line


def test_a_build_without_a_cpu_variant_for_this_processor_says_so(tmp_path: Path) -> None:
    """llama.cpp without one CPU library this processor runs: a clear error, not a crash."""
    import shutil
    import subprocess
    import sys

    import llama_cpp

    package = Path(llama_cpp.__file__).parent
    shutil.copytree(
        package,
        tmp_path / "llama_cpp",
        ignore=shutil.ignore_patterns("libggml-cpu*", "__pycache__"),
    )
    code = "from appliance.memory.embedder import load_cpu_backend; load_cpu_backend()"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{tmp_path}:{REPO}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "ModelLoadFailed: llama.cpp has no CPU backend that runs on this processor" in (
        result.stderr
    )
    assert f"libggml-cpu-*.so in {tmp_path / 'llama_cpp' / 'lib'}" in result.stderr
