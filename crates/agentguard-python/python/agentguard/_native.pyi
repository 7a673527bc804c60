"""Type stubs of the native module (PyO3); the public API is the pure-Python layer."""

from typing import Dict, List, Optional, Tuple

VERSION: str

class CancelToken:
    def __init__(self) -> None: ...
    def cancel(self) -> None: ...

class Executor:
    def __init__(self, config: str, base: str) -> None: ...
    def commands(self) -> List[str]: ...
    def run(
        self,
        name: str,
        params: str,
        cancel: Optional[CancelToken] = None,
        observe: bool = False,
    ) -> Tuple[Dict[str, object], bool]: ...
    def tool(self, name: str, params: str, cancel: Optional[CancelToken] = None) -> str: ...

class Fetcher:
    def __init__(
        self,
        allow: Optional[List[str]],
        allow_ports: List[int],
        allow_cidrs: List[str],
        nameservers: List[str],
        ca_file: Optional[str],
        max_bytes: Optional[int],
        audit: Optional[str],
        audit_key_env: Optional[str],
    ) -> None: ...
    def fetch(self, url: str) -> Tuple[str, int, List[Tuple[str, str]], bytes, str]: ...

class Proxy:
    def __init__(
        self,
        allow: Optional[List[str]],
        allow_ports: List[int],
        allow_cidrs: List[str],
        nameservers: List[str],
        host: str,
        port: int,
        audit: Optional[str],
        audit_key_env: Optional[str],
        queue: int,
    ) -> None: ...
    def address(self) -> Tuple[str, int]: ...
    def next_decision(self, timeout: float) -> Optional[str]: ...
    def dropped(self) -> int: ...
    def stop(self, grace: float) -> bool: ...

def verify(
    path: str, key: Optional[bytes] = None
) -> Tuple[int, str, int, bool, bool, int, Optional[Tuple[int, str]]]: ...
def read(path: str, key: Optional[bytes] = None) -> List[str]: ...
