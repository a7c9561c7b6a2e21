"""The ReconScore paper's studies (eval.cli.study): tables in the paper's layout from runs and generated sets."""
