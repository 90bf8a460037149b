"""Scores of predictions against responses: binary (AUC, log loss, calibration) and ordinal (kappa, Spearman,
per-threshold AUC). Plain numpy, below the trainer that selects on them and the protocols that report them."""
