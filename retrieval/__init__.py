"""Composed image retrieval: benchmarks, cached features, training-free methods, exact metrics.

Modules (importing this package loads no torch):
    datasets/   one loader per benchmark (patterncom, xview2-cir, icir, edir, circo, cirr, fashioniq), one registry
    features    extraction through recon_score.encoders (the project's one encoder registry), cached as safetensors
    methods/    one registry: text, image, sum, product, weicom, basic, freedom, cirevl, pic2word, searle, searle-oti, magiclens, compodiff
    data        EvalData, the features-level view every method and metric works on
    metrics     AP (non-interpolated, trapezoidal), Recall/Precision@K, mAP@K, vectorised over query chunks
    aggregate   overall / macro / per-group means, empty_positives
    evaluate    one method over EvalData -> per-query metrics
    bundle      the .npz bundle of `reconscore retrieve-eval`
    index       exact and FAISS top-k search for linear methods
    run, report `reconscore retrieve`: a benchmark end to end, tables in the papers' layout
"""
