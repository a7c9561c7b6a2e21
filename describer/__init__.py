"""RemoteDescriber: sample N captions per image with a multimodal LLM and keep the best by a metric.

Backends (transformers, vLLM, any OpenAI-compatible server) in describer.backends; selection in
describer.selection; the resumable run in describer.run; preference pairs for training in describer.pairs.
"""
