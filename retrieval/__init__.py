"""Composed image retrieval: benchmarks, cached features, methods and metrics (issue 6). Encoders come from
recon_score.encoders, the project's one registry."""
