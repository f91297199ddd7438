"""A bench-only MediaWiki that runs Kol-Zchut's real ChatbotRagContent, loaded from local checkouts.

The extension and the two it needs (WRArticleType, ArticleContentArea: ``RestApiGetContent`` calls
both) are never part of ragbot: the bench takes their directories (``--chatbotragcontent DIR
--articletype DIR --articlecontentarea DIR``, or ``RAGBOT_BENCH_CHATBOTRAGCONTENT`` and friends),
copies them into the run's folder and loads the copies into a throwaway wiki of its own
(``ragbot.dev.services.mediawiki`` on a free port, its own run dir and ``RAGBOT_SERVICES_OWNER``: the
shared test wiki is never touched). What MediaWiki 1.39 + PHP 8.2 needs beyond their code, each
applied to the copies or the wiki's settings and reported in the results:

- ``symfony/css-selector`` (ChatbotRagContent's composer.json): Debian's ``php-symfony-css-selector``
  autoloader, installed when missing;
- ``RestApiGetContent::getRevisionRecord()`` declares the pre-1.32 ``MediaWiki\\Storage\\RevisionRecord``,
  which 1.39 no longer aliases: a ``class_alias`` in the wiki's settings (else every content call is a
  500 ``TypeError``);
- WRArticleType's and ArticleContentArea's hook handlers lack the ``: void`` that 1.39's hook interfaces
  declare (a fatal error on every request): ``fit_hook_signatures`` adds it to the copies, only where
  the core interface has it.

Jobs: ChatbotRagContent pings from a job (``ragUpdate``); the wiki runs none on requests
(``$wgJobRunRate = 0``), so job runners run beside it as a deployment's would (``JOB_RUNNERS``): one
``runJobs.php --wait --type ragUpdate``, which looks for the extension's jobs every second, and one for
every other type. A single ``runJobs.php --wait`` for all types is not enough: it remembers which queues
had jobs for 15 s (``JobQueueGroup::PROC_CACHE_TTL``), so a ping waited up to 15 s (measured: an edit
retrievable after 15.1 s).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ragbot.dev.services.config import ServicesConfig
from ragbot.dev.services.host import apt_install
from ragbot.dev.services.mediawiki import MW_HOME, MediaWiki

EXTENSIONS = {  # option -> (the name in extension.json, the repository)
    "chatbotragcontent": ("ChatbotRagContent", "kolzchut/mediawiki-extensions-ChatbotRagContent"),
    "articletype": ("ArticleType", "kolzchut/mediawiki-extensions-WRArticleType"),
    "articlecontentarea": ("ArticleContentArea", "kolzchut/mediawiki-extensions-ArticleContentArea"),
}
CSS_SELECTOR_AUTOLOAD = Path("/usr/share/php/Symfony/Component/CssSelector/autoload.php")
CSS_SELECTOR_PACKAGE = "php-symfony-css-selector"
READY_TIMEOUT_S = 60.0
JOB_RUNNERS = {"ragupdate": ["--type", "ragUpdate"], "other": []}  # log name -> runJobs.php options
JOB_RUNNER_DESCRIPTION = "runJobs.php --wait --type ragUpdate, and runJobs.php --wait for the other types"
_HANDLER = re.compile(r"public function (on\w+)\(([^)]*)\)\s*\{")
_CORE_VOID = re.compile(r"public function (on\w+)\([^)]*\)\s*:\s*void")


class ExtensionWikiError(RuntimeError):
    """The bench wiki could not load the extensions, or did not answer."""


@dataclass(frozen=True)
class ExtensionDirs:
    """Local checkouts of the three extensions, by option name."""

    dirs: Mapping[str, Path]

    def commit(self, option: str) -> str:
        """The checkout's git commit when it is a git work tree, else 'unknown'."""
        found = subprocess.run(
            ["git", "-C", str(self.dirs[option]), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
        return found.stdout.strip() if found.returncode == 0 else "unknown"


def extension_dirs(given: Mapping[str, Path | None]) -> ExtensionDirs | str:
    """The checkouts to load, or why the ping part cannot run (a missing option or extension.json)."""
    missing = [f"--{option}" for option in EXTENSIONS if given.get(option) is None]
    if missing:
        return (
            f"no {', '.join(missing)} given (or RAGBOT_BENCH_{missing[0][2:].upper()}): the ping figures "
            "need local checkouts of Kol-Zchut's ChatbotRagContent, WRArticleType and ArticleContentArea"
        )
    dirs = {option: Path(str(given[option])) for option in EXTENSIONS}
    for option, folder in dirs.items():
        if not (folder / "extension.json").is_file():
            return f"--{option} {folder}: no extension.json there ({EXTENSIONS[option][1]})"
    return ExtensionDirs(dirs=dirs)


def core_void_handlers(core: Path = MW_HOME / "includes") -> set[str]:
    """Hook handler methods whose MediaWiki core interface declares ``: void``."""
    found: set[str] = set()
    for path in core.rglob("*Hook.php"):
        found.update(_CORE_VOID.findall(path.read_text(encoding="utf-8", errors="replace")))
    return found


def fit_hook_signatures(tree: Path, *, void_handlers: set[str]) -> list[str]:
    """Add ``: void`` to the tree's hook handlers that lack a return type where core declares one; say
    what changed (``file: method``)."""
    changed: list[str] = []
    for path in sorted(tree.rglob("*.php")):
        text = path.read_text(encoding="utf-8")

        def fit(match: re.Match[str], path: Path = path) -> str:
            if match.group(1) not in void_handlers:
                return match.group(0)
            changed.append(f"{path.relative_to(tree.parent)}: {match.group(1)}(): void")
            return f"public function {match.group(1)}({match.group(2)}): void {{"

        fitted = _HANDLER.sub(fit, text)
        if fitted != text:
            path.write_text(fitted, encoding="utf-8")
    return changed


def settings_tail(*, copies: Mapping[str, Path], ping_url: str, namespaces: list[int]) -> str:
    """What the bench appends to its wiki's LocalSettings.php."""
    loads = "\n".join(
        f"wfLoadExtension( '{EXTENSIONS[option][0]}', '{folder}/extension.json' );"
        for option, folder in copies.items()
    )
    return f"""
# Added by bench/indexing/kolzchut_wiki.py: Kol-Zchut's extensions from local checkouts (copies).
require_once '{CSS_SELECTOR_AUTOLOAD}';
if ( !class_exists( 'MediaWiki\\Storage\\RevisionRecord' ) ) {{
\tclass_alias( 'MediaWiki\\Revision\\RevisionRecord', 'MediaWiki\\Storage\\RevisionRecord' );
}}
{loads}
$wgChatbotRagContentPingURL = '{ping_url}';
$wgChatbotRagContentNamespaces = [ {", ".join(str(n) for n in namespaces)} ];
"""


@dataclass
class ExtensionWiki:
    """The running bench wiki: where it answers, its settings file and what was fitted to run it."""

    url: str
    config_file: Path
    compat: list[str] = field(default_factory=list)
    extensions: dict[str, str] = field(default_factory=dict)


def page_list_url(url: str) -> str:
    """The wiki's page list for reconcile: articles, no redirects (ingest follows its continuation)."""
    return (
        f"{url}/api.php?action=query&list=allpages&apnamespace=0&apfilterredir=nonredirects"
        "&aplimit=500&format=json"
    )


def loaded_extensions(url: str) -> list[str]:
    """The extensions the wiki says it runs (siteinfo), [] when it does not answer as a wiki."""
    try:
        response = httpx.get(
            f"{url}/api.php",
            params={"action": "query", "meta": "siteinfo", "siprop": "extensions", "format": "json"},
            timeout=30.0,
        )
        return [str(e["name"]) for e in response.json()["query"]["extensions"]]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return []


@contextmanager
def extension_wiki(
    *, dirs: ExtensionDirs, folder: Path, port: int, ping_url: str, namespaces: list[int]
) -> Iterator[ExtensionWiki]:
    """A throwaway wiki on ``port`` running copies of the extensions, pinging ``ping_url``, with a job
    runner; stopped (and only it) afterwards."""
    if not CSS_SELECTOR_AUTOLOAD.is_file():
        apt_install(CSS_SELECTOR_PACKAGE)
    copies: dict[str, Path] = {}
    compat = [
        f"symfony/css-selector from Debian's {CSS_SELECTOR_PACKAGE}",
        "class_alias MediaWiki\\Storage\\RevisionRecord (RestApiGetContent's return type; gone in 1.39)",
    ]
    void_handlers = core_void_handlers()
    for option, source in dirs.dirs.items():
        copy = folder / "extensions" / EXTENSIONS[option][0]
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns(".git", "node_modules"))
        compat += fit_hook_signatures(copy, void_handlers=void_handlers)
        copies[option] = copy
    config = ServicesConfig.from_environ(
        {
            "MW_PORT": str(port),
            "RAGBOT_SERVICES_OWNER": f"bench-wiki-ping-{port}",
            "RAGBOT_RUN_DIR": str(folder / "run"),
        }
    )
    wiki = MediaWiki(config)
    wiki.start()
    runners: list[subprocess.Popen[bytes]] = []
    try:
        with config.mw_config_file.open("a", encoding="utf-8") as settings:
            settings.write(settings_tail(copies=copies, ping_url=ping_url, namespaces=namespaces))
        url = f"http://127.0.0.1:{port}"
        wanted = {name for name, _ in EXTENSIONS.values()}
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not wanted <= set(loaded_extensions(url)):
            if time.monotonic() > deadline:
                server_log = config.mw_dir / "server.log"
                tail = "\n".join(server_log.read_text(errors="replace").splitlines()[-20:])
                raise ExtensionWikiError(f"the bench wiki did not load {sorted(wanted)}:\n{tail}")
            time.sleep(0.5)
        for name, options in JOB_RUNNERS.items():
            with (config.mw_dir / f"jobs-{name}.log").open("ab") as out:
                runners.append(
                    subprocess.Popen(
                        ["php", str(MW_HOME / "maintenance" / "runJobs.php"), "--wait", *options],
                        env={**os.environ, "MW_CONFIG_FILE": str(config.mw_config_file)},
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
        yield ExtensionWiki(
            url=url,
            config_file=config.mw_config_file,
            compat=compat,
            extensions={EXTENSIONS[o][1]: dirs.commit(o) for o in EXTENSIONS},
        )
    finally:
        for runner in runners:
            runner.terminate()
            try:
                runner.wait(timeout=20)
            except subprocess.TimeoutExpired:
                runner.kill()
                runner.wait()
        wiki.stop()
