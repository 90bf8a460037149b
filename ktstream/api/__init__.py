"""The notebook API: load a data set, train, evaluate, trace learners online, save and load, in a few calls."""
