"""Click sessions per user: a StatefulProcessor run unchanged by Spark or by Rescaler."""
