"""The console's HTTP views, a module per page: thin, each calls a service and renders its
result (what a page shows is worked out in the page's own modules, ``dashboard/*_page.py``,
``matrix.py`` and the like). ``dashboard/urls.py`` mounts them; ``site`` holds what
``rescaler/urls.py`` mounts outside the console (``/healthz``, ``/favicon.ico``, the error
handlers)."""
