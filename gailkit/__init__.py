"""gailkit: imitation learning with GAIL, from expert demonstration files to an ONNX policy."""

__version__ = "0.1.0"
