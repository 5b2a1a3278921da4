"""The autoscaler (issue 47): the decision model (``sizing``, on the vocabulary of ``model``; pure
Python), the signals it reads from what the runner reports, and the pipeline's policy."""
