"""The reload tools the proxy runs itself (`tools`), the loop that runs them between upstream
rounds (`loop`), and `context_search` in killable worker processes (`search`, `search_worker`)."""
