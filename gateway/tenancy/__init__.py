"""Tenants: config models, tenants/*.yaml loader, API keys, registry."""
