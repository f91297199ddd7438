"""bench/indexing/kolzchut_wiki.py: what the bench fits to run Kol-Zchut's extensions on MediaWiki 1.39,
and when it says the ping part cannot run."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.indexing.kolzchut_wiki import (  # noqa: E402
    ExtensionDirs,
    core_void_handlers,
    extension_dirs,
    fit_hook_signatures,
    page_list_url,
    settings_tail,
)

HOOKS_PHP = """<?php
class Hooks implements A, B, C {
	public function onMakeGlobalVariablesScript( &$vars, $out ) {
		$vars['x'] = 1;
	}
	public function onOutputPageParserOutput( $out, $parserOutput ) : void {
	}
	public function onParserFirstCallInit( $parser ) {
	}
}
"""


def test_void_is_added_only_where_core_declares_it_and_the_handler_has_no_return_type(
    tmp_path: Path,
) -> None:
    core = tmp_path / "core"
    core.mkdir()
    (core / "MakeGlobalVariablesScriptHook.php").write_text(
        "<?php interface MakeGlobalVariablesScriptHook {\n"
        "\tpublic function onMakeGlobalVariablesScript( &$vars, $out ): void;\n}\n"
    )
    (core / "OutputPageParserOutputHook.php").write_text(
        "<?php interface OutputPageParserOutputHook {\n"
        "\tpublic function onOutputPageParserOutput( $outputPage, $parserOutput ): void;\n}\n"
    )
    (core / "ParserFirstCallInitHook.php").write_text(
        "<?php interface ParserFirstCallInitHook {\n\tpublic function onParserFirstCallInit( $parser );\n}\n"
    )
    void = core_void_handlers(core)
    assert void == {"onMakeGlobalVariablesScript", "onOutputPageParserOutput"}

    tree = tmp_path / "ArticleType"
    (tree / "includes").mkdir(parents=True)
    hooks = tree / "includes" / "Hooks.php"
    hooks.write_text(HOOKS_PHP)
    changed = fit_hook_signatures(tree, void_handlers=void)

    assert changed == ["ArticleType/includes/Hooks.php: onMakeGlobalVariablesScript(): void"]
    text = hooks.read_text()
    assert "public function onMakeGlobalVariablesScript( &$vars, $out ): void {" in text
    assert "onOutputPageParserOutput( $out, $parserOutput ) : void {" in text  # already typed: untouched
    assert "public function onParserFirstCallInit( $parser ) {" in text  # core has no return type
    assert fit_hook_signatures(tree, void_handlers=void) == []  # a second pass changes nothing


def test_the_ping_part_says_why_it_cannot_run(tmp_path: Path) -> None:
    reason = extension_dirs({"chatbotragcontent": tmp_path, "articletype": None, "articlecontentarea": None})
    assert isinstance(reason, str)
    assert "--articletype" in reason and "--articlecontentarea" in reason

    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    (tmp_path / "a" / "extension.json").write_text("{}")
    (tmp_path / "b" / "extension.json").write_text("{}")
    given = {
        "chatbotragcontent": tmp_path / "a",
        "articletype": tmp_path / "b",
        "articlecontentarea": tmp_path / "c",
    }
    reason = extension_dirs(given)
    assert isinstance(reason, str) and "--articlecontentarea" in reason and "extension.json" in reason

    (tmp_path / "c" / "extension.json").write_text("{}")
    dirs = extension_dirs(given)
    assert isinstance(dirs, ExtensionDirs)
    assert dirs.commit("articletype") == "unknown"  # not a git checkout


def test_the_wiki_settings_load_the_copies_and_ping_the_bench_ingest(tmp_path: Path) -> None:
    copies = {
        "chatbotragcontent": tmp_path / "ChatbotRagContent",
        "articletype": tmp_path / "ArticleType",
        "articlecontentarea": tmp_path / "ArticleContentArea",
    }
    tail = settings_tail(copies=copies, ping_url="http://127.0.0.1:5555/v1/pages/changed", namespaces=[0])
    assert f"wfLoadExtension( 'ChatbotRagContent', '{tmp_path}/ChatbotRagContent/extension.json' );" in tail
    assert f"wfLoadExtension( 'ArticleType', '{tmp_path}/ArticleType/extension.json' );" in tail
    assert "$wgChatbotRagContentPingURL = 'http://127.0.0.1:5555/v1/pages/changed';" in tail
    assert "$wgChatbotRagContentNamespaces = [ 0 ];" in tail
    assert (
        "class_alias( 'MediaWiki\\Revision\\RevisionRecord', 'MediaWiki\\Storage\\RevisionRecord' )" in tail
    )
    assert "apfilterredir=nonredirects" in page_list_url("http://127.0.0.1:1")
