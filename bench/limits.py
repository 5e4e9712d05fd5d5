"""What limits each target row that misses, as measured: printed under RESULTS.md's targets.

A missed row is a finding, not only a number: the report names, for each missed row, what
was measured to hold it where it is (the profile, the floor, the layout), with the session
whose bench/HISTORY.md section has the measurement. A missed row without an entry here is
listed as such ("no measured limit recorded"): that is the next thing to measure.

Entries match a row by its bench and the start of its case text. Keep them to what was
measured; when a change moves a row, update or remove its entry in the same commit.
"""

from __future__ import annotations

__all__ = ["LIMITS", "limit_of"]

LIMITS: tuple[tuple[str, str, str], ...] = (
    (
        "knn",
        "find_like cosine: share of the read-bandwidth limit",
        "the host's memory bandwidth as much as the code: the read pass it is judged against"
        " runs at ~30–34 or ~45–52 GB/s from one process to the next (session 21: 25.5–52.5"
        " GB/s with the page cache in the same 2 MB folios, checked; session 23: medians"
        " 26.7–43.8 GB/s in six processes minutes apart, every mapping 2 MB-mapped), while"
        " the scan is held by its own work. Session 21 stored the heads in blocks of 16 rows (a block's 16 head"
        " dots are 16 VNNI multiply-adds, store.knn._simd) and took the generic dots out of the"
        " scan's loop (the scan 19.9–24.9 -> 28.4–30.7 GB/s; share 59.3–62.0 %); session 22"
        " seeded the scan from the query's nearest inverted list (rows read whole 5,033 ->"
        " 1,383 a query, the scan 25.3 -> 23.9 ms in a probe), and its three runs read 62.4–"
        "65.2 %. What holds the scan (session 21, one thread, in memory): ~29 ms of dots and"
        " bound at 10^7 rows; with the answer's own k-th key as the seed (an oracle) 551 rows"
        " are still read whole, the bound's own slack (session 22).",
    ),
    (
        "knn",
        "find_like hamming_then_rerank: hamming_then_rerank,",
        "the rerank's own time and the exact scan it is judged against (earthmem's pruned"
        " scan: every gain there moves this row up). Its split at 10^7 (session 22, 57"
        " queries, 2,560 candidates, medians): reading the candidates' rows on both threads"
        " 1.24 ms, the lists' estimate 0.41 ms, choosing the best 2,560 of ~28,000 0.44 ms,"
        " releasing the lists 0.18 ms, the centroids 0.11 ms; the whole rerank 2.2 ms."
        " Session 21's run C missed (0.263: its median rerank took 6.1 ms against 3.8–4.3 ms"
        " in A and B); session 22's three runs, with the parallel row reads, read 0.118–0.135.",
    ),
    (
        "queries",
        "did_change over HTTP, 16 keep-alive connections",
        "the server's CPU per request: building the answer ~57 % (the series, the facts, sigma,"
        " the neighbours), signing ~20 %, parsing, JSON and the access log ~19 % (session 15's"
        " profile, after two rounds of cuts of 14–20 % each); the load generator shares the two"
        " cores, so the row follows the host's load and steal more than the paired share of the"
        " ceiling does. Met in quiet runs (1,566–1,847 req/s, sessions 15–16).",
    ),
    (
        "queries",
        "area_over_time ~1 km^2 x 1 year, warm",
        "the exact quantiles' sort in the statistics kernel ~30–35 % of a warm call, copying the"
        " box's rectangles out of ~100 MB of decoded chunks ~11 %, validating and signing the"
        " answer ~11 % (session 15); one preempted call moves a tens-of-ms answer against a"
        " baseline of seconds. Met in quiet runs (130–132x, session 15).",
    ),
    (
        "queries",
        "area_over_time ~1 km^2 x 1 year, cold",
        "the ~1 km² box (105 x 114 cells) lies in 4 storage chunks that all hold edge cells, so"
        " no block summary answers it: a cold call fetches and decodes 384 chunks (5.8 MB"
        " compressed, 89 MB decoded; session 12). Session 19 (py-spy over 150 cold calls of a"
        " probe, median 123 ms, the call's own thread): waiting on the tiles' fetch and decode"
        " ~52 % (~64 ms), loading the snapshot's whole inventory and overpass index ~30 % (~37"
        " ms), the chunk index ~7 %, the series and anomaly statistics the rest — where 100x of"
        " the rioxarray baseline (~1.3 s) allows ~13 ms. Finer decode units (zarr sharding,"
        " measured) cut the decode by a third at best; an inventory read for the box's"
        " partitions only would save about half of its ~37 ms: neither reaches the budget."
        " Session 21, timed piece by piece on fresh contexts (medians of 15): the repository"
        " open 3.5 ms, the whole inventory 27.7 ms, the NDVI chunk index 3.0 ms, the rest of"
        " the answer (the chunks' fetch and decode, statistics, signing) 66.3 ms; a whole cold"
        " answer 104.5 ms. Session 23: icechunk 1.1.21 spends ~100 µs of CPU per chunk object"
        " on local disk, batched or not, fresh repository or warm (the answer's 384 chunks:"
        " 26–41 ms wall, 42–63 ms CPU, against 5.7 ms for Python's own open and read of as"
        " many chunk files), and the inventory's 334 partition chunks are read the same way"
        " (27–36 ms, ~9 of them decoding and indexing in Python): the objects alone hold a cold answer above ~50 ms, ~75 ms with the"
        " decode, indexes and open (~15x). Only a layout with far fewer objects per answer"
        " (time chunks of many weeks, or a per-block series beside the weekly chunks) can"
        " reach 100x.",
    ),
    (
        "memory",
        "memory writes/s",
        "8 writer threads of one process through the store's group commit, one fdatasync per"
        " batch: the rate follows the host's CPU speed and disk sync more than the code — 450 to"
        " 1,341 writes/s across sessions 10–16, with no code change between some of them"
        " (session 12 traced a slow phase to the machine).",
    ),
    (
        "memory",
        "memory_create",
        "a write's CPU: ~1.5–2.3 ms in process (one process: the interpreter lock caps 8 writers"
        " near 1 / CPU per write, 431–647/s by the host's state); over HTTP ~1.7–2.3 ms of"
        " server CPU in session 18 (event loop ~0.7 ms — response, thread hand-off, parsing, JSON"
        " — and the in-process work on a worker thread; nothing is done twice: session 16). Until"
        " session 17 the bench's own httpx clients took ~1.05 ms a write on the same 2 cores"
        " (394–448/s); driven by bench.loadgen (raw HTTP/1.1, its own process) the 8-writer rows"
        " ran 535–654/s (session 18: 611 and 542 by hand, 535 and 654 in the whole run), so a miss"
        " now means the host's CPU or steal. The 1-writer p50 follows the disk sync (0.2–4 ms"
        " on this VM).",
    ),
    (
        "scale",
        "ingest of the area, Dask LocalCluster of 2 worker processes",
        "the coordinator's work runs while the workers wait: in a 2-worker run ~17.7 s is the"
        " coordinator alone (session 16's timeline: imports and the cluster ~3 s; Dagster's"
        " instance, plan and runs; 20 gaps with no task running, 7.6 s, for each family's merge,"
        " commit and events and the next step's discovery; 3.3 s after the last task) against"
        " ~24 s with both workers busy, and the same tasks cost ~16 % more CPU when two run at"
        " once. The coordinator's share s = 22.6–23.9 % bounds the row at 2 / (1 + s) = 1.61–1.63"
        " (Amdahl), and the gaps and the shared cores put it at 1.2–1.5 (sessions 14–18). The"
        " demo's ~420 tasks of ~0.13 s cannot amortise ~10 s of coordinator CPU; in process is as"
        " fast as 2 workers here (0.95 [0.87–1.07], session 18), so in process stays the default.",
    ),
    (
        "scale",
        "ingest of the area, Dask, 1 worker: coordinator's share",
        "what the coordinator's ~10 s of CPU is (py-spy over the timed window, session 17):"
        " Dagster's event writes 2.9 s, imports 1.5 s, cube commits 1.2 s, Dagster's step"
        " machinery 1.2 s, the Tessera tables and assets 1.4 s, gathering the tasks' results"
        " 0.6 s; session 15 cut ~30 % of it (events, metadata validation, run creation). Most of"
        " it is per run and per partition, so it shrinks in share only with larger tasks.",
    ),
    (
        "ingest",
        "Dagster ingest,",
        "a commit costs ~96 ms of CPU (zstd ~20, icechunk ~50 of which half is creating ~36"
        " files, summaries ~6, our Python ~10; session 14), a partition commits twice (one per"
        " family) and the demo reads ~1 scene (~25 k cells, ~70 ms of read + reproject) per"
        " commit, so writing alone costs more than the baseline's read; Dagster's per-partition"
        " events and checks add ~60 ms a read (the rows with and without Dagster beside it)."
        " 0.8 needs writing and Dagster together under a quarter of read + compute:"
        " partitions much larger than the demo's, or fewer, larger commits. Fewer commits"
        " alone do not get there: one commit per family for the 40-scene plan's 40 partitions"
        " instead of one per family and partition took 0.64–0.91 of the write pass's wall time"
        " (4 alternated rounds, session 20), ~10–15 ms saved a partition of ~125 ms, ~0.49 at"
        " best.",
    ),
)
"""``(bench, case prefix, what limits the row, as measured)``."""


def limit_of(bench: str, case: str) -> str | None:
    """The measured limit of a row (None: nothing recorded for it)."""
    for b, prefix, text in LIMITS:
        if b == bench and case.startswith(prefix):
            return text
    return None
