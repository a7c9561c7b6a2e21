"""RemoteDescriber: sample N captions per image with a multimodal LLM and keep the best by a metric (backends,
selection, the resumable run, and preference pairs for training). See docs/describer.md."""
