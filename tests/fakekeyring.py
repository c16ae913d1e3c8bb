"""A keyring backend in memory for tests, behaving like the real `keyring` module's functions.

`SecretStore(backend=MemoryKeyring())` uses it where the app would use `keyring` itself:
get_password answers None for a missing entry, and delete_password of a missing entry raises
`keyring.errors.PasswordDeleteError`, as every real backend does. `items` is what is stored.
"""

from __future__ import annotations

from keyring.errors import PasswordDeleteError


class MemoryKeyring:
    def __init__(self) -> None:
        self.items: dict[tuple[str, str], str] = {}

    def set_password(self, service: str, user: str, password: str) -> None:
        self.items[(service, user)] = password

    def get_password(self, service: str, user: str) -> str | None:
        return self.items.get((service, user))

    def delete_password(self, service: str, user: str) -> None:
        if self.items.pop((service, user), None) is None:
            raise PasswordDeleteError("Password not found")
