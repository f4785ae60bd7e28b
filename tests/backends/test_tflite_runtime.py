"""`TfliteRunner`: signatures by key, inputs by name, any batch and length, float in and out.

Why: callers (decoding, scoring, the export check) feed dicts of numpy arrays by the spec's input
names and read float32 back, whatever the model stores. The tiny models here are plain
`tf.Module`s, so these tests say what the runner does without the compiler in the way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from seqc.backends.tflite.convert import TfliteConversionError, convert
from seqc.backends.tflite.runtime import TfliteRunner

W = np.random.default_rng(0).uniform(-0.5, 0.5, (4, 3)).astype(np.float32)


class Tiny(tf.Module):
    """Two signatures over [B, T, 4] floats and a [B, T] mask, B and T unknown."""

    @tf.function(
        autograph=False,
        input_signature=[
            tf.TensorSpec([None, None, 4], tf.float32, name="x"),
            tf.TensorSpec([None, None], tf.bool, name="mask"),
        ],
    )
    def project(self, x: tf.Tensor, mask: tf.Tensor) -> dict[str, tf.Tensor]:
        y = tf.tanh(tf.einsum("btd,de->bte", x, W))
        # expand_dims, not [..., None]: TFLite has no builtin for a new-axis strided slice.
        return {"y": y * tf.expand_dims(tf.cast(mask, tf.float32), -1)}

    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def scale(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"z": 2.0 * x + 1.0}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    module = Tiny()
    path = tmp_path_factory.mktemp("tiny") / "sm"
    signatures = {"serving_default": module.project, "scale": module.scale}
    tf.saved_model.save(module, str(path), signatures=signatures)
    return path


def feeds(b: int, t: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.arange(t)[None, :] < rng.integers(1, t + 1, b)[:, None]
    return {"x": rng.uniform(-1, 1, (b, t, 4)).astype(np.float32), "mask": mask}


def want(f: dict[str, np.ndarray]) -> np.ndarray:
    return np.tanh(f["x"] @ W) * f["mask"][..., None]


def test_shapes_change_between_calls_and_signatures_are_by_key(saved: Path, tmp_path: Path) -> None:
    model = convert(saved, "none")
    (tmp_path / "m.tflite").write_bytes(model)
    runner = TfliteRunner(tmp_path / "m.tflite")  # a path loads as bytes do
    assert runner.signatures == {
        "scale": {"inputs": ["x"], "outputs": ["z"]},
        "serving_default": {"inputs": ["mask", "x"], "outputs": ["y"]},
    }
    for b, t in ((2, 5), (1, 1), (3, 8), (2, 5)):
        f = feeds(b, t, seed=b + t)
        np.testing.assert_allclose(runner.run(f)["y"], want(f), atol=1e-6)
    x = np.arange(6, dtype=np.float32).reshape(3, 2).repeat(2, axis=1)
    np.testing.assert_array_equal(runner.run({"x": x}, "scale")["z"], 2 * x + 1)


def test_int8_interface_is_quantized_and_dequantized(saved: Path) -> None:
    """A model with int8 inputs and outputs (`inference_input_type=int8`, not what `convert`
    makes) still takes and returns float32: the runner uses each tensor's scale and zero point."""

    def calibration() -> Iterator[dict[str, np.ndarray]]:
        for i in range(8):
            yield {"x": np.random.default_rng(i).uniform(-1, 1, (2, 4)).astype(np.float32)}

    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved), signature_keys=["scale"])
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = calibration
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    runner = TfliteRunner(converter.convert())
    assert runner.input_details("scale")["x"]["dtype"] == np.int8
    assert runner.output_details("scale")["z"]["dtype"] == np.int8
    x = np.linspace(-0.9, 0.9, 12, dtype=np.float32).reshape(3, 4)  # inside the calibrated range
    z = runner.run({"x": x}, "scale")["z"]
    assert z.dtype == np.float32
    step = runner.output_details("scale")["z"]["quantization_parameters"]["scales"][0]
    assert np.max(np.abs(z - (2 * x + 1))) <= 2 * step  # 3/255 per step: within two


def test_bad_feeds_name_what_the_signature_takes(saved: Path, tmp_path: Path) -> None:
    runner = TfliteRunner(convert(saved, "none"))
    f = feeds(2, 3)
    with pytest.raises(KeyError, match=r"no signature 'decode' .* has scale, serving_default"):
        runner.run(f, "decode")
    with pytest.raises(ValueError, match="takes mask, x; missing mask; unexpected m"):
        runner.run({"x": f["x"], "m": f["mask"]})
    with pytest.raises(ValueError, match=r"input `x` .* shape \(2, 12\); .* takes \(-1, -1, 4\)"):
        runner.run({"x": f["x"].reshape(2, 12), "mask": f["mask"]})
    with pytest.raises(ValueError, match=r"shape \(2, 3, 2\); .* takes \(-1, -1, 4\)"):
        runner.run({"x": f["x"][..., :2], "mask": f["mask"]})
    with pytest.raises(FileNotFoundError, match="no TFLite model"):
        TfliteRunner(tmp_path / "missing.tflite")


def test_feeds_are_cast_to_the_input_dtypes(saved: Path) -> None:
    """float64 from numpy defaults and int masks are accepted: cast, as the TF signature would."""
    runner = TfliteRunner(convert(saved, "none"))
    f = feeds(2, 4)
    loose = {"x": f["x"].astype(np.float64), "mask": f["mask"].astype(np.int64)}
    np.testing.assert_allclose(runner.run(loose)["y"], want(f), atol=1e-6)


def test_int8_calibrates_each_signature_from_its_own_samples(saved: Path) -> None:
    """A dict sample feeds every signature whose inputs it has, by name and rank; a (key, feeds)
    pair feeds one signature (how a decoder step gets caches that no dev batch holds)."""

    def forward_only() -> Iterator[dict[str, np.ndarray]]:
        for i in range(6):
            yield feeds(2, 5, seed=i)  # one shape: see the next test

    def both() -> Iterator[object]:
        for i, f in enumerate(forward_only()):
            yield f
            yield "scale", {"x": np.random.default_rng(i).uniform(-1, 1, (3, 4))}

    with pytest.raises(
        TfliteConversionError, match=r"fed no sample to 'scale' takes x: \(None, 4\)"
    ):
        convert(saved, "int8", forward_only)
    runner = TfliteRunner(convert(saved, "int8", both))
    f = feeds(3, 6, seed=9)
    assert np.max(np.abs(runner.run(f)["y"] - want(f))) < 0.05
    x = np.linspace(-0.9, 0.9, 8, dtype=np.float32).reshape(2, 4)
    assert np.max(np.abs(runner.run({"x": x}, "scale")["z"] - (2 * x + 1))) < 0.05


def test_calibration_across_shapes_needs_shapes_computed_at_run_time(saved: Path) -> None:
    """TFLite's calibrator resizes inputs one by one; this model's MUL checks its operands'
    shapes when prepared, so a second sample of another shape fails in between. seqc graphs
    compute shapes at run time and calibrate across shapes (test_tflite_convert.py)."""

    def two_shapes() -> Iterator[dict[str, np.ndarray]]:
        yield feeds(2, 3)
        yield feeds(3, 4)

    with pytest.raises(TfliteConversionError, match="give each signature samples of one shape"):
        convert(saved, "int8", two_shapes, ["serving_default"])
