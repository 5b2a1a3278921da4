"""Top-level URLs."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from dashboard.api.docs import ApiDocsPermission, docs_page
from dashboard.views import site as site_views
from rescaler.metrics import metrics_view

urlpatterns = [
    path("healthz", site_views.healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("favicon.ico", site_views.favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include("dashboard.api.urls")),
    # Signed-in users only unless RESCALER_PUBLIC_API_DOCS (dashboard/api/docs.py).
    path(
        "api/schema/",
        SpectacularAPIView.as_view(permission_classes=[ApiDocsPermission]),
        name="schema",
    ),
    path(
        "api/docs/",
        docs_page(SpectacularSwaggerView.as_view(url_name="schema")),
        name="swagger-ui",
    ),
    path("api/redoc/", docs_page(SpectacularRedocView.as_view(url_name="schema")), name="redoc"),
    # the last pattern under /api/: JSON 404 there whatever DEBUG says
    re_path(r"^api/(?P<unmatched>[\s\S]*)\Z", site_views.api_not_found, name="api-not-found"),
    path("", include("dashboard.urls")),
]

# JSON under /api/, Django's pages elsewhere (dashboard/views/site.py)
handler400 = "dashboard.views.site.bad_request"
handler403 = "dashboard.views.site.permission_denied"
handler404 = "dashboard.views.site.page_not_found"
handler500 = "dashboard.views.site.server_error"
