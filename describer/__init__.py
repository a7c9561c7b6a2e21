"""RemoteDescriber: sample N captions per image with a multimodal LLM and keep the best by a metric.

Only the authors' prompt is here so far (describer.prompts); the backends and selection are issue 4.
"""
