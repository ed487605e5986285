#!/usr/bin/env python3
"""Checks every link of the built docs site (mdBook's HTML in target/book).

A relative link must name a file the build wrote, and a `#fragment` an id on that
page; links to other sites are left alone (CI has no network). Exits non-zero and
lists each broken link with the page it is on.

    python3 scripts/check-links.py target/book
"""
import html.parser
import pathlib
import sys
import urllib.parse


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        for key in ("href", "src"):
            if a.get(key) and tag in ("a", "img", "link", "script"):
                self.links.append(a[key])


def parse(path, cache={}):
    if path not in cache:
        page = Page()
        page.feed(path.read_text(encoding="utf-8"))
        cache[path] = page
    return cache[path]


def main(root):
    root = pathlib.Path(root).resolve()
    pages = sorted(root.rglob("*.html"))
    if not pages:
        sys.exit(f"{root}: no HTML pages (run `mdbook build docs` first)")
    bad, checked = [], 0
    for page in pages:
        for link in parse(page).links:
            url = urllib.parse.urlsplit(link)
            if url.scheme or link.startswith("//") or link.startswith("mailto:"):
                continue
            checked += 1
            target = page if not url.path else (page.parent / urllib.parse.unquote(url.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            rel = page.relative_to(root)
            if root not in target.parents and target != root:
                bad.append(f"{rel}: {link} leaves the site")
            elif not target.exists():
                bad.append(f"{rel}: {link} (no such file)")
            elif url.fragment and target.suffix == ".html" and url.fragment not in parse(target).ids:
                bad.append(f"{rel}: {link} (no #{url.fragment} on {target.relative_to(root)})")
    for b in bad:
        print(b, file=sys.stderr)
    print(f"{len(pages)} pages, {checked} links checked, {len(bad)} broken")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "target/book")
