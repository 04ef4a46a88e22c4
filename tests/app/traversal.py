"""The /sites traversal corpus: a tree with secrets around it, and the paths that try to reach them.

`build_traversal_tree(data_dir, account_id)` writes the published tree and, OUTSIDE it, files
holding `SECRET_MARKER`, plus symlinks inside the tree that point out (to files and folders).
`traversal_paths()` returns raw request targets (to be sent byte for byte) generated from
dot-segment spellings x separator spellings x depths x targets, and the odd cases besides. A
correct server answers every one with 403, 404 or 301 and never with a byte of a secret.
The edge tests can replay the same corpus through TCP.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

SECRET_MARKER = "MAXY-SECRET-2c9f1e-DO-NOT-SERVE"
PASSWD_MARKER = "root:x:0:0"

# Spellings of "..": plain, percent-encoded in every case, half-encoded, double and triple
# encoded, overlong UTF-8 (2, 3 and 4 bytes), %u (IIS), fullwidth and one-dot-leader dots (raw and
# encoded), and the Tomcat "..;" path parameter.
DOTS: tuple[str, ...] = (
    "..",
    "%2e%2e",
    "%2E%2E",
    "%2e%2E",
    "%2e.",
    ".%2e",
    "%2E.",
    ".%2E",
    "%252e%252e",
    "%252E%252E",
    ".%252e",
    "%25252e%25252e",
    "%c0%ae%c0%ae",
    "%C0%AE%C0%AE",
    "%c0.%c0.",
    "%e0%80%ae%e0%80%ae",
    "%f0%80%80%ae%f0%80%80%ae",
    "%c0%2e%c0%2e",
    "%uff0e%uff0e",
    "%ef%bc%8e%ef%bc%8e",
    "\uff0e\uff0e",
    "%e2%80%a4%e2%80%a4",
    "\u2024\u2024",
    "..;",
    "...",
    "%2e%2e%00",
)

# Spellings of "/": plain, encoded, double encoded, backslash in every form, overlong slashes.
SEPARATORS: tuple[str, ...] = (
    "/",
    "%2f",
    "%2F",
    "%252f",
    "\\",
    "%5c",
    "%5C",
    "%255c",
    "%c0%af",
    "%e0%80%af",
    "%c1%9c",
    "%ef%bc%8f",
)

# What lies outside the sites root, relative to the depth that reaches it (see the tree).
TARGETS_BY_DEPTH: dict[int, tuple[str, ...]] = {
    1: ("secret.txt", "account.json"),
    2: ("secret.txt",),
    3: ("secret.txt", "keys/cookie-hmac.key"),
    8: ("etc/passwd",),
}


def build_traversal_tree(data_dir: Path, account_id: str) -> Path:
    """Write the sites tree and the secrets around it; return the sites root."""
    account_dir = data_dir / "accounts" / account_id
    root = account_dir / "sites"
    (root / "sub" / "deeper").mkdir(parents=True, exist_ok=True)
    (root / "index.html").write_text("<!doctype html><h1>Published home</h1>\n")
    (root / "sub" / "index.html").write_text("<!doctype html><h1>Sub page</h1>\n")
    (root / "sub" / "deeper" / "note.txt").write_text("just a note\n")
    (root / "style.css").write_text("h1 { color: teal; }\n")
    (root / "empty-dir").mkdir(exist_ok=True)
    # Secrets: one, two and three levels above the root, and in a sibling folder.
    (account_dir / "secret.txt").write_text(f"{SECRET_MARKER} account level\n")
    (data_dir / "accounts" / "secret.txt").write_text(f"{SECRET_MARKER} accounts level\n")
    (data_dir / "secret.txt").write_text(f"{SECRET_MARKER} data level\n")
    outside = data_dir / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "secret.txt").write_text(f"{SECRET_MARKER} outside folder\n")
    (outside / "index.html").write_text(f"<p>{SECRET_MARKER} outside index</p>\n")
    # Symlinks inside the tree that point out: files, folders, relative, absolute, chained.
    links = {
        "escape-file.txt": outside / "secret.txt",
        "escape-dir": outside,
        "escape-rel": Path("../secret.txt"),
        "escape-up": Path(".."),
        "escape-root": Path("/"),
        "escape-etc": Path("/etc"),
        "escape-passwd.txt": Path("/etc/passwd"),
        "chain.html": Path("escape-file.txt"),
        "sub/up": Path("../.."),
        "sub/index-escape.html": outside / "index.html",
        "dangling.html": data_dir / "no-such-file",
    }
    for name, destination in links.items():
        link = root / name
        if not link.is_symlink():
            os.symlink(destination, link)
    return root


SYMLINK_PATHS: tuple[str, ...] = (
    "/sites/escape-file.txt",
    "/sites/escape-dir",
    "/sites/escape-dir/",
    "/sites/escape-dir/secret.txt",
    "/sites/escape-dir/index.html",
    "/sites/escape-rel",
    "/sites/escape-up",
    "/sites/escape-up/",
    "/sites/escape-up/secret.txt",
    "/sites/escape-up/account.json",
    "/sites/escape-root/etc/passwd",
    "/sites/escape-root/",
    "/sites/escape-etc/passwd",
    "/sites/escape-passwd.txt",
    "/sites/chain.html",
    "/sites/sub/up/secret.txt",
    "/sites/sub/up/sites/../secret.txt",
    "/sites/sub/up/",
    "/sites/sub/index-escape.html",
    "/sites/dangling.html",
)

ODD_PATHS: tuple[str, ...] = (
    # Absolute paths and drive letters.
    "/sites//etc/passwd",
    "/sites///etc/passwd",
    "/sites/%2fetc%2fpasswd",
    "/sites/%2Fetc/passwd",
    "/sites/%252fetc%252fpasswd",
    "/sites/C:/Windows/win.ini",
    "/sites/c:%5cwindows%5cwin.ini",
    "/sites/C%3a/secret.txt",
    "/sites/file:%2f%2f%2fetc%2fpasswd",
    "/sites/\\\\server\\share\\secret.txt",
    # NUL, control characters, empty and dot segments.
    "/sites/index.html%00",
    "/sites/index.html%00.txt",
    "/sites/%00/../secret.txt",
    "/sites/sub%00/",
    "/sites/%0a",
    "/sites/%0d%0aSet-Cookie:x=1",
    "/sites/%7f",
    "/sites/a//b",
    "/sites//",
    "/sites/./index.html",
    "/sites/sub/./index.html",
    "/sites/%2e/index.html",
    "/sites/sub/.",
    "/sites/sub/..",
    "/sites/sub/../index.html",
    "/sites/sub/%2e%2e/index.html",
    "/sites/.hidden",
    "/sites/.git/config",
    # The prefix itself spelled to escape.
    "/sites%2f..%2fsecret.txt",
    "/sites%2f%2e%2e%2f%2e%2e%2fsecret.txt",
    "/sites/..",
    "/sites/../",
    "/sites/../sites/../secret.txt",
    "/sites/..%2f..%2fsecret.txt",
    "/sites/%2e%2e%2f%2e%2e%2fsecret.txt",
    "/sites/..%5c..%5csecret.txt",
    "/sites/%2e%2e?download=1",
    "/sites/../secret.txt?x=/sites/index.html",
    # Invalid percent-encoding and invalid UTF-8.
    "/sites/%",
    "/sites/%zz",
    "/sites/%2",
    "/sites/%ff%fe",
    "/sites/%ed%a0%80",
    "/sites/index%2ehtml%2f..%2f..%2fsecret.txt",
    # Things that do not exist but look harmless: 404, never a listing or a secret.
    "/sites/no-such-page.html",
    "/sites/empty-dir/",
    "/sites/sub/deeper/",
    "/sites/sub",
    "/sites/empty-dir",
)


def traversal_paths() -> list[str]:
    """Return at least 200 raw /sites request targets that must all be refused."""
    paths: list[str] = []
    for dots, sep in itertools.product(DOTS, SEPARATORS):
        # Three levels up to the data folder's secret, every step spelled the same way.
        paths.append("/sites/" + sep.join([dots] * 3) + sep + "secret.txt")
    for depth, names in TARGETS_BY_DEPTH.items():
        for dots in DOTS:
            for name in names:
                paths.append("/sites/" + "/".join([dots] * depth) + "/" + name)
                paths.append("/sites/sub/" + "/".join([dots] * (depth + 1)) + "/" + name)
    paths.extend(SYMLINK_PATHS)
    paths.extend(ODD_PATHS)
    unique = list(dict.fromkeys(paths))
    assert len(unique) >= 200, len(unique)
    return unique
