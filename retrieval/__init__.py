"""Composed image retrieval: benchmark loaders (datasets/), cached features through recon_score.encoders, one
registry of methods, exact metrics and their averaging, the features bundle, FAISS search, and the `retrieve`
run with its tables. Importing this package loads no torch. See docs/retrieval.md."""
