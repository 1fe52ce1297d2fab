"""Every reach into Apache Beam's internals but its file systems' (``transforms/filesystems.py``).

Each function works around a gap in Beam's public API and names what it touches; all were
checked against apache-beam 2.77.0.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
import weakref
from typing import Any, Callable, Sequence

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineRunner

from transforms.processes import forking

__all__ = ["CHECKED_BEAM_VERSION", "local_runner", "local_workers", "use_anonymous_gcp_credentials",
           "AUTO_WORKERS_MIN_BYTES", "WORKER_BYTES", "VERIFY_MIN_CORES", "WORKERS_RULE", "bytes_worth_counting",
           "choose_local_workers", "dask_runner", "wants_dask", "register_dask_options", "install_construction_memos"]

CHECKED_BEAM_VERSION = "2.77.0"

_DIRECT_NAMES = (None, "DirectRunner", "direct", "SwitchingDirectRunner")


def local_runner(options: PipelineOptions) -> PipelineRunner | None:
    """Returns the runner object for a DirectRunner or DaskRunner run, or None to let Beam pick.

    Beam 2.77's DirectRunner first tries to download the Prism runner (a network round trip, or
    a DNS time-out, offline) and falls back to its in-process FnApiRunner: batch jobs go straight
    to that FnApiRunner, with the same options. On every runner in this process, a bundle whose
    worker dies fails the job (``_fail_bundles_of_lost_workers``).
    """
    _fail_bundles_of_lost_workers()
    standard = options.view_as(StandardOptions)
    if standard.runner in _DASK_NAMES and not standard.streaming:
        return dask_runner()
    if standard.runner not in _DIRECT_NAMES or standard.streaming or options.get_all_options().get("prism_location"):
        return None
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    # Linux only: where it was measured (macOS's own libraries may not survive a fork: Python spawns there)
    forked = options.view_as(DirectOptions).direct_running_mode == "multi_processing" and sys.platform == "linux"
    if forked:
        _start_forking()  # it loads Beam while the pipeline is built
    _without_timed_flushes()
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    runner = fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))
    if forked:
        _fork_workers(runner)
    return runner


def local_workers(options: PipelineOptions) -> int | None:
    """How many SDK workers a DirectRunner run shares this machine's cores among, else None.

    ``--direct_num_workers`` (0: one per CPU) in the ``multi_threading`` and ``multi_processing``
    modes; 1 ``in_memory``.
    """
    if options.view_as(StandardOptions).runner not in _DIRECT_NAMES or options.get_all_options().get("prism_location"):
        return None
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "in_memory":
        return 1
    return direct.direct_num_workers or os.cpu_count() or 1


# How a local run chooses worker processes (``choose_local_workers``, ``WORKERS_RULE``), as
# measured in BENCHMARKS.md ("Scaling benchmark", "On 16 cores", "Worker processes where they pay").
AUTO_WORKERS_MIN_BYTES = 1 << 30
WORKER_BYTES = 256 << 20
VERIFY_MIN_CORES = 4


def bytes_worth_counting(cores: int) -> int:
    """How many input bytes a job need count to choose its workers: past this, one per core."""
    return max(AUTO_WORKERS_MIN_BYTES, cores * WORKER_BYTES)


# The rule ``choose_local_workers`` follows, as --help_beam's --direct_num_workers and the docs say it.
WORKERS_RULE = (f"Left out, a local build or reshard of at least {AUTO_WORKERS_MIN_BYTES >> 30} GiB of input "
                f"runs one worker process per {WORKER_BYTES >> 20} MiB of it, at least 2 and at most one "
                f"per usable core; verify does so only on {VERIFY_MIN_CORES} or more cores (on 2 cores a "
                "second verify worker costs 1.8x the CPU for no wall-time gain); smaller runs keep one "
                "process.")


def choose_local_workers(options: PipelineOptions, input_bytes: int | None, cores: int,
                         min_cores: int = 2) -> str | None:
    """Gives a large local run worker processes for its size (``WORKERS_RULE``), unless the flags chose.

    Args:
        options: The run's options; changed in place when workers are chosen.
        input_bytes: The input's size (at least: counting may stop at
            ``bytes_worth_counting(cores)``), or None when it is not known.
        cores: The cores this process may use.
        min_cores: Fewer cores than this keep one process (verify: ``VERIFY_MIN_CORES``).

    Returns:
        One line saying what was chosen, or None when nothing was changed.
    """
    # Flags given, even at Beam's default, choose: PipelineOptions._flags (Beam 2.77.0).
    given = {str(flag).split("=", 1)[0] for flag in getattr(options, "_flags", None) or ()}
    if (local_workers(options) is None or given & {"--direct_num_workers", "--direct_running_mode"}
            or input_bytes is None or input_bytes < AUTO_WORKERS_MIN_BYTES or cores < max(2, min_cores)):
        return None
    workers = max(2, min(cores, input_bytes // WORKER_BYTES))
    direct = options.view_as(DirectOptions)
    direct.direct_running_mode = "multi_processing"
    direct.direct_num_workers = workers
    size = f"{input_bytes / (1 << 30):.1f} GiB{' or more' if workers == cores else ''}"
    return (f"{size} of input: running {workers} worker processes, one per {WORKER_BYTES >> 20} MiB "
            "up to one per core (--direct_num_workers 1 keeps one process)")


# Beam 2.77's command line for a worker process (``fn_runner.FnApiRunner``, ``multi_processing``) and its main.
_SDK_WORKER_MODULE = "apache_beam.runners.worker.sdk_worker_main"
_SDK_WORKER_COMMAND = f"{sys.executable} -m {_SDK_WORKER_MODULE}"
# Packages whose loaded modules the forking process loads too, so that a worker unpickles the job at once.
_PRELOADED_PACKAGES = ("transforms", "beam_jobs")


def _start_forking() -> None:
    """Starts the process the local runner's workers are forked from (``processes/forking.py``): it loads
    Beam's SDK worker, the job's modules and the construction memos once, where each new Python of Beam's
    loads them again (1.5-2 CPU s a worker on a 2-core EPYC, 3.7 on a 16-core Xeon: BENCHMARKS.md, "On 16
    cores")."""
    preload = [_SDK_WORKER_MODULE] + sorted(name for name in sys.modules if name.split(".")[0] in _PRELOADED_PACKAGES)
    forking.start_forking(preload, [f"{__name__}:install_construction_memos"], f"{_SDK_WORKER_MODULE}:main")


def _popen_or_fork(args: Any, *rest: Any, env: dict[str, str] | None = None, **kwargs: Any) -> Any:
    """``subprocess.Popen``, but Beam's own worker command is a fork of the forking process while one runs."""
    if args == _SDK_WORKER_COMMAND and env is not None and not rest and kwargs == {"shell": True}:
        forked = forking.fork(env)
        if forked is not None:
            return forked
    return subprocess.Popen(args, *rest, env=env, **kwargs)


def _fork_workers(runner: PipelineRunner) -> None:
    """Makes ``runner`` fork its worker processes (``_start_forking``); the forking process ends when its
    ``run_pipeline`` returns (its workers have ended by then), unless another pipeline still uses it.

    Beam 2.77's ``local_job_service.SubprocessSdkWorker.run`` starts each with ``subprocess.Popen``; that
    module's ``subprocess`` becomes one whose ``Popen`` is ``_popen_or_fork``.
    """
    from apache_beam.runners.portability import local_job_service

    if not isinstance(local_job_service.subprocess, types.SimpleNamespace):
        local_job_service.subprocess = types.SimpleNamespace(Popen=_popen_or_fork)
    run = runner.run_pipeline

    def run_then_stop_forking(pipeline: Any, options: PipelineOptions) -> Any:
        with forking.in_use():
            _start_forking()
            return run(pipeline, options)

    runner.run_pipeline = run_then_stop_forking


def _without_timed_flushes() -> None:
    """Stops the local runner's data plane from sending output on a timer.

    Beam 2.77's FnApiRunner sends each output stream every ``DATA_BUFFER_TIME_LIMIT_MS`` (1 s),
    also halfway through an element, while the receiver decodes every chunk as whole elements:
    under load a job failed at random (``Invalid PaneInfoEncoding``). At 0, as Beam's process
    workers have it, a stream is sent when full or closed; batch jobs lose nothing by it.
    """
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    worker_handlers.DATA_BUFFER_TIME_LIMIT_MS = 0


def _fail_bundles_of_lost_workers() -> None:
    """Makes the FnApiRunner fail the instructions of an SDK worker whose control stream ended.

    In Beam 2.77 ``worker_handlers.ControlConnection._read`` ends when the worker dies without
    failing the instructions waiting for it: a stage that hands nothing back (the publish's last)
    waited forever. Here every waiting instruction, and any sent afterwards, fails.
    """
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    connection = worker_handlers.ControlConnection
    if getattr(connection, "_fails_when_lost", False):
        return
    read, push = connection._read, connection.push

    def lost() -> RuntimeError:
        return RuntimeError("an SDK worker was lost (its process ended or was killed): its control stream "
                            "closed before it answered")

    def read_then_fail_waiting(self) -> None:
        try:
            read(self)
        finally:
            self._lost = True
            for instruction_id in list(self._futures_by_id):
                future = self._futures_by_id.pop(instruction_id, None)
                if future is not None:
                    future.abort(lost())

    def push_unless_lost(self, req):
        future = push(self, req)
        if getattr(self, "_lost", False) and future is not None and not future.is_done():
            self._futures_by_id.pop(future.instruction_id, None)
            future.abort(lost())
        return future

    connection._read, connection.push = read_then_fail_waiting, push_unless_lost
    connection._fails_when_lost = True


def install_construction_memos() -> None:
    """Makes Beam keep what it works out again and again while it builds, translates and starts a pipeline.

    Beam 2.77 takes ``inspect.signature`` of a function each time it asks for its arguments
    (``core.get_function_args_defaults``) and of each of a DoFn's ~35 methods each time it asks for
    its state and timer specs (``userstate.get_dofn_specs``): about eight times per ``ParDo`` while
    a pipeline is built and translated, and again for every DoFn a worker unpickles (a 20-photo
    build: 14,000 signatures, a quarter of its CPU). It also builds a new view of the options
    (``PipelineOptions.view_as``: a parser, the flags parsed again) at every step applied, type
    check and DoFn pickled (a tenth of the CPU). None of these answers changes while a pipeline is
    built and run, so each is kept; lists and sets are handed out fresh.
    """
    from apache_beam.transforms import core, userstate

    _replace_once(core, "get_function_args_defaults", _function_args_once)
    _replace_once(userstate, "get_dofn_specs", _dofn_specs_once)
    _replace_once(PipelineOptions, "view_as", _options_views_once)


def _replace_once(owner: Any, name: str, keeping: Callable[[Any], Any]) -> None:
    """Sets ``owner.<name>`` to ``keeping(<its function>)``, unless an earlier call did."""
    found = getattr(owner, name)
    if not getattr(found, "_found_once", False):
        replacement = keeping(found)
        replacement._found_once = True
        setattr(owner, name, replacement)


def _kept_for(kept: dict[int, tuple[Any, dict]], obj: Any) -> dict | None:
    """What ``kept`` holds for ``obj`` (by id, dropped with ``obj``), or None for an object without weak references."""
    key = id(obj)
    found = kept.get(key)
    if found is None or found[0]() is not obj:
        try:
            ref = weakref.ref(obj, lambda _, key=key: kept.pop(key, None))
        except TypeError:
            return None
        found = kept[key] = (ref, {})
    return found[1]


def _function_args_once(find: Callable[[Any], tuple[list, list]]) -> Callable[[Any], tuple[list, list]]:
    """``core.get_function_args_defaults``, its answer kept per Python function (asked again if it changed)."""
    found: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # function -> {bound: (state, args, defaults)}

    def get_function_args_defaults(f: Any) -> tuple[list, list]:
        if isinstance(f, types.MethodType) and isinstance(f.__func__, types.FunctionType):
            func, bound = f.__func__, True  # a bound method's signature is its function's less the first
        elif isinstance(f, types.FunctionType):
            func, bound = f, False
        else:
            return find(f)
        state = (func.__code__, func.__defaults__, func.__kwdefaults__, getattr(func, "__signature__", None),
                 getattr(func, "__wrapped__", None))
        kept = found.setdefault(func, {}).get(bound)
        if kept is None or any(a is not b for a, b in zip(kept[0], state)):
            args, defaults = find(f)
            kept = found[func][bound] = (state, tuple(args), tuple(defaults))
        return list(kept[1]), list(kept[2])
    return get_function_args_defaults


def _dofn_specs_once(find: Callable[[Any], tuple[set, set]]) -> Callable[[Any], tuple[set, set]]:
    """``userstate.get_dofn_specs``, its answer kept per DoFn object."""
    found: dict[int, tuple[Any, dict]] = {}

    def get_dofn_specs(dofn: Any) -> tuple[set, set]:
        kept = _kept_for(found, dofn)
        if kept is None:  # a DoFn that takes no weak reference: asked each time
            return find(dofn)
        if "specs" not in kept:
            states, timers = find(dofn)
            kept["specs"] = (frozenset(states), frozenset(timers))
        return set(kept["specs"][0]), set(kept["specs"][1])
    return get_dofn_specs


def _options_views_once(view_as: Callable[[Any, type], Any]) -> Callable[[Any, type], Any]:
    """``PipelineOptions.view_as``, its view kept per options object and view class."""
    found: dict[int, tuple[Any, dict]] = {}

    def kept_view_as(self: PipelineOptions, cls: type) -> Any:
        views = _kept_for(found, self)
        if views is None:  # options that take no weak reference: a new view each time
            return view_as(self, cls)
        view = views.get(cls)
        if view is None or view._all_options is not self._all_options or view._flags is not self._flags:
            view = views[cls] = view_as(self, cls)
        return view
    return kept_view_as


def use_anonymous_gcp_credentials() -> None:
    """Makes Beam's GCS client connect anonymously at once (for ``--no_auth``).

    Marks ``apache_beam.internal.gcp.auth._Credentials`` (Beam 2.77.0) as looked up, with none:
    Beam otherwise falls back to anonymous after about 24 s of retried lookups.
    """
    from apache_beam.internal.gcp import auth

    with auth._Credentials._credentials_lock:
        auth._Credentials._credentials = None
        auth._Credentials._credentials_init = True


# --- Beam's DaskRunner ------------------------------------------------------------------------------

_DASK_NAMES = ("DaskRunner", "apache_beam.runners.dask.dask_runner.DaskRunner")


def wants_dask(argv: Sequence[str]) -> bool:
    """True if the command line names the DaskRunner or one of Beam's ``--dask_*`` flags."""
    return any(str(arg).startswith("--dask_") or str(arg).split("=")[-1] in _DASK_NAMES for arg in argv)


def register_dask_options() -> None:
    """Makes Beam's ``DaskOptions`` (``--dask_client_address`` ...) known to ``PipelineOptions``.

    Importing ``apache_beam.runners.dask.dask_runner`` (2.77.0) registers them; it takes about
    0.9 s, so the jobs do it only when the flags ask for Dask.
    """
    import apache_beam.runners.dask.dask_runner  # noqa: F401  (registers DaskOptions)


def dask_runner() -> PipelineRunner:
    """Returns a runner that runs the jobs on a Dask ``distributed`` cluster.

    Beam 2.77.0's ``DaskRunner`` loses output (docs/runners.md, "Dask", says how): this one keeps
    Beam's options, client and result and translates the graph itself, side inputs computed once.
    Batch pipelines in the global window only.
    """
    from apache_beam.runners.dask.dask_runner import DaskRunner

    class _ProjectDaskRunner(DaskRunner):
        def run_pipeline(self, pipeline: Any, options: PipelineOptions) -> Any:
            return _run_on_dask(pipeline, options)

    return _ProjectDaskRunner()


def _run_on_dask(pipeline: Any, options: PipelineOptions) -> Any:
    """Translates ``pipeline`` into ``dask.bag`` operations and submits them (see ``dask_runner``)."""
    import dask
    import dask.bag as db
    import dask.distributed as ddist
    from apache_beam import pvalue
    from apache_beam.pipeline import PipelineVisitor
    from apache_beam.runners.dask import overrides
    from apache_beam.runners.dask.dask_runner import DaskOptions

    import apache_beam as beam

    dask_options = options.view_as(DaskOptions).get_all_options(drop_default=True, current_only=True)
    bag_kwargs = DaskOptions._extract_bag_kwargs(dask_options)
    pipeline.replace_all([o for o in overrides.dask_overrides()
                          if type(o).__name__ != "GroupByKeyOverride"] + [_group_by_key_override()])
    bags: dict[Any, Any] = {}  # PCollection -> dask.bag.Bag
    consumed: set[int] = set()

    def new_bag(values: list[Any]) -> Any:
        if bag_kwargs.get("partition_size"):
            return db.from_sequence(values, partition_size=bag_kwargs["partition_size"])
        count = bag_kwargs.get("npartitions") or min(len(values), _DASK_PARTITIONS)
        return db.from_sequence(values, npartitions=max(1, count))

    class Translate(PipelineVisitor):
        def visit_transform(self, node: Any) -> None:
            transform = node.transform
            inputs = [i for i in node.inputs if not isinstance(i, pvalue.PBegin)]
            consumed.update(id(i) for i in inputs)
            consumed.update(id(si.pvalue) for si in node.side_inputs)
            outputs = dict(node.outputs)
            if isinstance(transform, overrides._Create):
                made = {None: new_bag(list(transform.values))}
            elif isinstance(transform, beam.Impulse):
                made = {None: new_bag([b""])}
            elif isinstance(transform, overrides._Read):
                splits = list(transform.source.split(_DASK_SPLIT_BYTES))
                made = {None: new_bag(splits).map_partitions(_read_splits)}
            elif isinstance(transform, overrides._GroupByKeyOnly):
                # "tasks": without a client at hand Dask would choose its on-disk shuffle, for one process.
                made = {None: bags[inputs[0]].groupby(_first, shuffle="tasks").map(_grouped)}
            elif isinstance(transform, overrides._Flatten):
                made = {None: db.concat([bags[i] for i in inputs])}
            elif isinstance(transform, overrides._Reshuffle):
                made = {None: bags[inputs[0]]}
            elif isinstance(transform, beam.ParDo):
                args, kwargs = transform.raw_side_inputs
                views = [(type(si), si._view_options()) for si in node.side_inputs]
                sides = [dask.delayed(_concat)(bags[si.pvalue].to_delayed(optimize_graph=False))
                         for si in node.side_inputs]
                window_fn = inputs[0].windowing.windowfn
                tagged = bags[inputs[0]].map_partitions(
                    _run_bundle, transform.fn, node.full_label, list(args), dict(kwargs), window_fn, views, *sides)
                made = {tag: tagged.map_partitions(_with_tag, None if tag in (None, "None") else tag)
                        for tag in outputs}
            else:
                raise NotImplementedError(f"{node.full_label}: {type(transform).__name__} has no translation "
                                          "for Dask in this project (beam_compat.dask_runner)")
            for tag, pcoll in outputs.items():
                bags[pcoll] = made[tag] if tag in made else made[None]

    pipeline.visit(Translate())
    ends = [bag.map_partitions(_nothing) for pcoll, bag in bags.items() if id(pcoll) not in consumed]
    client = ddist.Client(**dask_options)
    # Unoptimized, so that each PCollection is one set of keys, computed once for all its readers.
    return _dask_result(client, client.compute(ends, optimize_graph=False))


# A Create's elements are spread over this many bundles (Dask partitions) unless --dask_npartitions
# or --dask_partition_size says otherwise; a bounded source is split into reads of this many bytes.
_DASK_PARTITIONS = 32
_DASK_SPLIT_BYTES = 64 << 20


def _dask_result(client: Any, futures: Any) -> Any:
    """Beam's ``DaskRunnerResult``, closing the client once the pipeline finished (Beam's never does)."""
    from apache_beam.runners.dask.dask_runner import DaskRunnerResult

    class DaskResult(DaskRunnerResult):
        def wait_until_finish(self, duration: int | None = None) -> str:
            try:
                return super().wait_until_finish(duration)
            finally:
                if self.state != "RUNNING":
                    self.client.close()
    return DaskResult(client, futures)


def _group_by_key_override() -> Any:
    """Replaces ``GroupByKey`` with Beam's Dask ``_GroupByKeyOnly`` leaf (global window, batch)."""
    from apache_beam.pipeline import PTransformOverride
    from apache_beam.runners.dask import overrides

    import apache_beam as beam

    class GroupByKeyOverride(PTransformOverride):
        def matches(self, applied: Any) -> bool:
            return applied.transform.__class__ == beam.GroupByKey

        def get_replacement_transform_for_applied_ptransform(self, applied: Any) -> Any:
            return overrides._GroupByKeyOnly()
    return GroupByKeyOverride()


def _first(item: Any) -> Any:
    """A (key, value)'s key, made hashable: lists as tuples, dicts as sorted pairs (Dask groups by hash)."""
    return _hashable(item[0])


def _hashable(key: Any) -> Any:
    if isinstance(key, (list, tuple)):
        return (type(key).__name__, *map(_hashable, key))
    if isinstance(key, dict):
        return ("dict", *sorted((_hashable(k), _hashable(v)) for k, v in key.items()))
    return key


def _grouped(group: Any) -> Any:
    _, items = group
    return items[0][0], [value for _, value in items]


def _nothing(values: Any) -> list[Any]:
    for _ in values:
        pass
    return []


def _concat(parts: list[list[Any]]) -> list[Any]:
    return [value for part in parts for value in part]


def _with_tag(pairs: Any, tag: str | None) -> list[Any]:
    return [value for found, value in pairs if found == tag]


def _read_splits(splits: Any) -> list[Any]:
    out = []
    for split in splits:
        tracker = split.source.get_range_tracker(split.start_position, split.stop_position)
        out.extend(split.source.read(tracker))
    return out


def _run_bundle(items: Any, fn: Any, label: str, args: list[Any], kwargs: dict[str, Any], window_fn: Any,
                views: list[Any], *sides: list[Any]) -> list[tuple[str | None, Any]]:
    """Runs one bundle of a DoFn; returns every output, ``finish_bundle``'s too, with its tag."""
    from apache_beam import DoFn
    from apache_beam.runners.common import DoFnContext, DoFnInvoker, DoFnSignature, Receiver, _OutputHandler
    from apache_beam.transforms.sideinputs import SideInputMap
    from apache_beam.transforms.window import GlobalWindows

    out: list[tuple[str | None, Any]] = []

    class Collect(Receiver):
        def __init__(self, tag: str | None) -> None:
            self.tag = tag

        def receive(self, windowed_value: Any) -> None:
            out.append((self.tag, windowed_value.value))

    class Receivers(dict):
        def __missing__(self, tag: str) -> Collect:
            self[tag] = Collect(tag)
            return self[tag]

    receivers = Receivers()
    handler = _OutputHandler(window_fn=window_fn, main_receivers=Collect(None), tagged_receivers=receivers,
                             per_element_output_counter=None, output_batch_converter=None,
                             process_yields_batches=False, process_batch_yields_elements=False)
    side_inputs = [SideInputMap(kind, view, [GlobalWindows.windowed_value(v) for v in values])
                   for (kind, view), values in zip(views, sides)]
    invoker = DoFnInvoker.create_invoker(
        DoFnSignature(fn), handler, context=DoFnContext(label, state=None), side_inputs=side_inputs,
        input_args=args, input_kwargs=kwargs, user_state_context=None,
        bundle_finalizer_param=DoFn.BundleFinalizerParam())
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for item in items:
        invoker.invoke_process(GlobalWindows.windowed_value(item))
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    return out
