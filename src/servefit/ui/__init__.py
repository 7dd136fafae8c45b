"""``servefit ui``: a local web page over the application layer.

:mod:`servefit.ui.query` reads the page's state (a query string of ``servefit plan``'s flags)
into a :class:`~servefit.app.Deployment`; :mod:`servefit.ui.views` asks :mod:`servefit.app`
and the CLI's document builders for what the page shows; :mod:`servefit.ui.server` serves
the page (``static/``: one HTML, one JS and one CSS file, hand-written, no third-party code)
and the JSON API. A surface beside :mod:`servefit.cli`: it computes nothing itself.
"""
