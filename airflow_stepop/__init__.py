def get_provider_info(): return {}
