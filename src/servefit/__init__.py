"""servefit: will this LLM workload fit this serving system, and how fast will it run?"""

__version__ = "0.1.0"
