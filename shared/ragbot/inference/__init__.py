"""Inference runtimes shared by the embedders and rerankers: ONNX Runtime sessions and torch precision."""
