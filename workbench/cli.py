"""The ``workbench`` command: submit, list, get, logs, cancel, top (Arena's verbs), and more."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from .backends.base import split_rank_prefix
from .backends.kubernetes.manifests import KINDS as EXPORT_KINDS
from .errors import SpecError, WorkbenchError
from .flags import add_spec_flags, spec_from_args, split_command
from .spec import ACTIVE_STATUSES, parse_statuses
from .tables import describe, format_duration, jobs_table, table, top_text
from .wirejson import dumps_strict


def build_parser() -> argparse.ArgumentParser:
    """The whole CLI grammar."""
    p = argparse.ArgumentParser(
        prog="workbench",
        description="Launch and manage distributed training jobs (local processes or a cluster).",
    )
    p.add_argument("--version", action="version", version=f"workbench {_version()}")
    sub = p.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True

    s = sub.add_parser(
        "submit",
        help="submit a training job",
        description="Submit a training job. "
        "Put the command after the flags, e.g. `workbench submit --workers 2 -- python train.py`.",
    )
    add_spec_flags(s)
    s.add_argument(
        "-f",
        "--file",
        help="read the spec from a YAML file: a workbench spec or a Kubeflow PyTorchJob, "
        "TFJob or MPIJob manifest as it is (flags override it)",
    )
    s.add_argument(
        "--image-map",
        action="append",
        metavar="IMAGE=DIR",
        help="with a Kubeflow manifest: run IMAGE's command as local processes from DIR, "
        "which stands in for the image's files (repeatable)",
    )
    s.add_argument(
        "--wait",
        action="store_true",
        help="follow the job to its end; exit non-zero unless it succeeded",
    )
    s.add_argument(
        "--follow-logs", action="store_true", help="with --wait, stream rank 0's log meanwhile"
    )
    _output_flag(s, long="--format")  # --output is the data upload flag here
    s.add_argument("command", nargs=argparse.REMAINDER, help="program and its arguments")

    ls = sub.add_parser("list", aliases=["ls"], help="list jobs")
    ls.add_argument("--status", action="append", help="only jobs in this status (repeatable)")
    _output_flag(ls, choices=("table", "json", "wide"))

    g = sub.add_parser("get", help="show one job: spec, ranks, exit codes, timings, events")
    g.add_argument("name")
    _output_flag(g, choices=("text", "json", "yaml"))

    lg = sub.add_parser("logs", help="print a rank's logs, or every rank's with --all")
    lg.add_argument("name")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    which = lg.add_mutually_exclusive_group()
    which.add_argument("-r", "--rank", type=int, default=0, help="which rank (default 0)")
    which.add_argument(
        "-a", "--all", action="store_true", help="every rank, each line prefixed [rank N]"
    )
    lg.add_argument("-t", "--tail", type=int, help="only the last N lines (of each rank)")
    _output_flag(lg, choices=("text", "json"))  # json: one {"job","rank","line"} per line

    c = sub.add_parser("cancel", aliases=["stop"], help="cancel jobs (every process of them)")
    c.add_argument("names", nargs="+", metavar="name")
    c.add_argument(
        "--no-wait",
        dest="wait",
        action="store_false",
        help="ask and return at once (every process still stops within the grace period)",
    )

    d = sub.add_parser("delete", aliases=["rm"], help="forget finished jobs and their files")
    d.add_argument("names", nargs="+", metavar="name")

    r = sub.add_parser("rerun", help="run a job's exact spec and script snapshot again")
    r.add_argument("name")
    r.add_argument("--name", dest="new_name", help="name of the new job")
    r.add_argument("--wait", action="store_true", help="follow the new job to its end")
    _output_flag(r)

    x = sub.add_parser(
        "export", help="print a job's manifest for a cluster (any job, local ones included)"
    )
    x.add_argument("name")
    x.add_argument(
        "--as",
        dest="kind",
        choices=list(EXPORT_KINDS),
        default="pytorchjob",
        help="what to render (default pytorchjob)",
    )

    q = sub.add_parser("queue", help="jobs waiting for GPUs, in order, and why each waits")
    _output_flag(q)

    t = sub.add_parser("top", help="GPUs on this host and their allocation to jobs")
    t.add_argument("what", nargs="?", choices=["node", "job"], default="node")
    t.add_argument(
        "--backend",
        help="whose nodes (and active jobs) to show, e.g. kubernetes (default: the configured "
        "backend)",
    )
    _output_flag(t)

    from .data_cli import add_data_parser

    add_data_parser(sub)  # workbench data ls|du|head URL
    for verb, helptext in (
        ("images", "the deep-learning image catalogue"),
        ("specs", "instance specs and prices"),
    ):
        x = sub.add_parser(verb, help=helptext)
        _output_flag(x)
    return p


def _output_flag(
    p: argparse.ArgumentParser, choices: Sequence[str] = ("text", "json"), long: str = "--output"
) -> None:
    p.add_argument(
        "-o",
        long,
        dest="fmt",
        choices=list(choices),
        default=choices[0],
        help=f"output format ({', '.join(choices)})",
    )


def _version() -> str:
    from . import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    """Entry point; WorkbenchErrors become one line on stderr, never a traceback."""
    args = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if args and args[0] == "submit":
        args, command = split_command(args)
    parser = build_parser()
    ns = parser.parse_args(args)
    if ns.verb == "submit":
        command = command or list(ns.command)
    try:
        return int(run(ns, command) or 0)
    except SpecError as e:
        print(f"error: {' '.join(str(e).splitlines())}", file=sys.stderr)  # always one line
        return 2
    except WorkbenchError as e:
        print(f"error: {' '.join(str(e).splitlines())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def run(ns: argparse.Namespace, command: list[str]) -> int:
    """Carry out one parsed verb."""
    from .api import default_manager

    verb = ns.verb
    if verb == "data":  # browses stores; needs no job manager
        from .data_cli import run_data

        return run_data(ns)
    m = default_manager()
    if verb == "submit":
        from .kubeflow_manifest import check_runs_here, load_file, parse_image_map

        image_map = parse_image_map(ns.image_map)
        backend = ns.backend or m.settings.backend
        base, manifest = load_file(ns.file, image_map, backend) if ns.file else (None, False)
        if image_map and base is None:
            raise SpecError("image_map", "applies to -f MANIFEST only", "add -f job.yaml")
        spec = spec_from_args(ns, command, base)
        if manifest and backend == "local":  # its image is not pulled for processes
            check_runs_here(spec, image_map)
        if ns.dry_run:  # every check, nothing created
            plan = m.admit(spec)
            if ns.fmt == "json":
                _print_json(plan.to_dict())
            elif plan.manifests:  # a cluster backend: what would be sent, as YAML documents
                import yaml

                print("".join(f"# {line}\n" for line in plan.describe().splitlines()), end="")
                print(yaml.safe_dump_all(plan.manifests, sort_keys=False), end="")
            else:
                print(plan.describe())
            return 0
        record = m.submit(spec)
        if ns.fmt == "json" and not ns.wait:
            _print_json(record.to_dict())
        else:
            print(
                f"job {record.name} submitted ({record.backend}); follow it with `workbench logs -f {record.name}`",
                file=sys.stderr if ns.fmt == "json" else sys.stdout,
            )
        if ns.wait:
            return _wait(m, record.name, ns.fmt, ns.follow_logs)
        return 0
    if verb in ("list", "ls"):
        records = m.list(status=parse_statuses(ns.status or []))
        if ns.fmt == "json":
            _print_json([r.to_dict() for r in records])
        else:
            print(jobs_table(records, wide=ns.fmt == "wide"))
        return 0
    if verb == "get":
        record = m.get(ns.name)
        if ns.fmt == "json":
            _print_json(record.to_dict())
        elif ns.fmt == "yaml":
            import yaml

            print(yaml.safe_dump(record.to_dict(), sort_keys=False), end="")
        else:
            print(_describe(record))
        return 0
    if verb == "logs":
        rank = None if ns.all else ns.rank
        lines = m.logs(ns.name, rank=rank, follow=ns.follow, tail=ns.tail)
        if ns.fmt == "json":
            lines = (_json_log_line(ns.name, rank, line) for line in lines)
        if ns.follow:
            for line in lines:
                print(line, flush=True)
        else:  # one write per batch: with PYTHONUNBUFFERED a print per line costs ~10 us
            while batch := list(itertools.islice(lines, 4096)):
                sys.stdout.write("\n".join(batch) + "\n")
        return 0
    if verb in ("cancel", "stop"):
        for name in ns.names:
            record = m.cancel(name) if ns.wait else m.cancel(name, wait=0)
            state = record.status.value
            print(f"job {name}: {state}")
        return 0
    if verb in ("delete", "rm"):
        for name in ns.names:
            m.delete(name)
            print(f"job {name} deleted")
        return 0
    if verb == "rerun":
        record = m.rerun(ns.name, new_name=ns.new_name)
        if ns.fmt == "json" and not ns.wait:
            _print_json(record.to_dict())
        else:
            print(f"job {record.name} submitted (rerun of {ns.name})")
        return _wait(m, record.name, ns.fmt, False) if ns.wait else 0
    if verb == "export":
        from .kubeflow_manifest import export_yaml

        print(export_yaml(m.get(ns.name), ns.kind, m.catalog, m.settings.kubernetes), end="")
        return 0
    if verb == "queue":
        from .queue import queue_entries, queue_table

        entries = queue_entries(m.list(status=["Pending"]))
        if ns.fmt == "json":
            _print_json([e.to_dict() for e in entries])
        else:
            print(queue_table(entries))
        return 0
    if verb == "top":
        if ns.what == "job":
            records = m.list(status=list(ACTIVE_STATUSES))
            if ns.backend:  # one backend's jobs; an unknown name fails as `top node` does
                m.backend(ns.backend)
                records = [r for r in records if r.backend == ns.backend]
            if ns.fmt == "json":
                _print_json([r.to_dict() for r in records])
            else:
                print(jobs_table(records, wide=True))
        elif ns.fmt == "json":
            _print_json([n.to_dict() for n in m.nodes(ns.backend)])
        else:
            print(top_text(m.nodes(ns.backend)))
        return 0
    if verb == "images":
        images = m.catalog.images
        if ns.fmt == "json":
            _print_json(
                {
                    n: {
                        "framework": i.framework,
                        "default": i.default_tag,
                        "tags": i.tags,
                        "description": i.description,
                    }
                    for n, i in images.items()
                }
            )
        else:
            rows = [
                (f"{n}:{t}" + (" (default)" if t == i.default_tag else ""), i.framework, ref)
                for n, i in images.items()
                for t, ref in i.tags.items()
            ]
            print(table(("IMAGE", "FRAMEWORK", "REFERENCE"), rows))
        return 0
    if verb == "specs":
        specs = m.catalog.specs
        if ns.fmt == "json":
            _print_json({n: s.to_dict() for n, s in specs.items()})
        else:
            spec_rows: list[tuple[str, ...]] = [
                (
                    s.name,
                    f"{s.gpus:g}",
                    s.gpu_model or "-",
                    str(s.cpu),
                    s.memory,
                    f"${s.price_per_hour:.2f}",
                )
                for s in specs.values()
            ]
            print(table(("SPEC", "GPUS/WORKER", "GPU", "VCPU", "MEMORY", "PRICE/H"), spec_rows))
        return 0
    raise AssertionError(verb)  # argparse limits the verbs


def _wait(m: Any, name: str, fmt: str, follow_logs: bool) -> int:
    if follow_logs:
        for line in m.logs(name, rank=0, follow=True):
            print(line, flush=True)
    record = m.wait(name)
    if fmt == "json":
        _print_json(record.to_dict())
    else:
        print(describe(record))
    return 0 if record.status.value == "Succeeded" else 1


def _json_log_line(job: str, rank: int | None, line: str) -> str:
    r, text = (rank, line) if rank is not None else split_rank_prefix(line)
    return json.dumps({"job": job, "rank": r, "line": text})


def _print_json(data: Any) -> None:
    # Strict JSON (NaN from an older store as null), as the REST API writes it.
    print(dumps_strict(data, indent=2, default=str))


def _ts(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def _describe(r: Any) -> str:
    s = r.spec
    lines = [
        f"Name:       {r.name}",
        f"Status:     {r.status.value}" + (f"  ({r.message})" if r.message else ""),
        f"Attempt:    {r.attempt} of {int(s.get('max_retries', 0)) + 1}",
        f"Backend:    {r.backend} (runtime: {r.runtime})",
        f"Image:      {s.get('image')} -> {r.image}",
    ]
    if r.backend == "local" and r.runtime == "process":
        lines.append(
            "            (not pulled: workers run as local processes in the submitting Python environment)"
        )
    elif r.backend == "local" and r.runtime == "container":
        lines.append("            (workers run as containers from this image, host network)")
    lines += [
        f"Command:    {' '.join(s.get('command', []))}",
        f"Workdir:    {s.get('working_dir')}",
        f"Workers:    {r.workers} x {s.get('procs_per_worker')} process(es), framework {s.get('framework')}",
        f"GPUs:       {r.gpus_per_worker:g} per worker, {r.gpus_total:g} in the job, "
        f"spec {s.get('instance_spec')} (${r.price_per_hour:.2f}/h per worker)",
        f"Created:    {_ts(r.created_at)}",
        f"Started:    {_ts(r.started_at)}",
        f"Finished:   {_ts(r.finished_at)}",
        f"Duration:   {format_duration(r.elapsed())}",
        f"Cost:       ${r.cost():.4f}",
    ]
    if s.get("data"):
        lines.append(f"Data:       {', '.join(s['data'])}")
    if s.get("env"):
        lines.append(f"Env:        {', '.join(f'{k}={v}' for k, v in s['env'].items())}")
    if s.get("backend_options"):
        opts = ", ".join(f"{k}={v}" for k, v in s["backend_options"].items())
        lines.append(f"Options:    {opts} (backend_options)")
    if r.job_dir:
        lines.append(f"Job dir:    {r.job_dir}")
    if r.ranks:
        lines.append("Ranks:")
        rows = []
        for x in r.ranks:
            dur = (
                format_duration((x.finished_at or time.time()) - x.started_at)
                if x.started_at
                else "-"
            )
            rows.append(
                (
                    str(x.rank),
                    x.state.value,
                    str(x.pid or "-"),
                    "-" if x.exit_code is None else str(x.exit_code),
                    x.gpu_devices or "-",
                    dur,
                )
            )
        lines += [
            "  " + ln
            for ln in table(
                ("RANK", "STATE", "PID", "EXIT", "GPU DEVICES", "DURATION"), rows
            ).splitlines()
        ]
    if r.events:
        lines.append("Events:")
        event_rows = [
            (time.strftime("%H:%M:%S", time.localtime(e.time)), e.reason, e.message)
            for e in r.events
        ]
        lines += ["  " + ln for ln in table(("TIME", "REASON", "MESSAGE"), event_rows).splitlines()]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
