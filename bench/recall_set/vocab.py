"""The words of the labelled recall set: synthetic places, topics and their paraphrases.

Hand-written, fixed text (the generator only chooses among it with a seeded
random generator), so the set is reproducible and reviewable.

* :data:`SYNTHETIC_PLACES` — invented field, village, pond and road names,
  anchored at generated points inside the demo area (never resolved by a
  gazetteer: their items carry lat/lng).
* :data:`FEATURES` — the sample's named features (``pipelines.sample``'s
  manifest: Kanke Lake, Jumar River, ...) with descriptive phrases that name
  them without their name ("the reservoir north-east of the town").
* :data:`TOPICS` — what is observed at synthetic places: each topic has
  facets (one way of saying it); a facet has the item's title and statement
  templates and a paraphrase that must share no content word with them.
* :data:`FEATURE_TOPICS` — what is observed at named features, in text that
  never names the feature.
* :data:`DECISIONS` — placeless items (decisions, constraints) that share some
  words with the observations (distractors for a text-only ranking).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DECISIONS",
    "FEATURES",
    "FEATURE_TOPICS",
    "SYNTHETIC_PLACES",
    "TOPICS",
    "Facet",
    "Feature",
    "Topic",
]

SYNTHETIC_PLACES: tuple[tuple[str, str], ...] = (
    ("Amrai field", "field"),
    ("Bhelwa field", "field"),
    ("Sarjom field", "field"),
    ("Karanj field", "field"),
    ("Dumbari field", "field"),
    ("Kusum field", "field"),
    ("Mahua field", "field"),
    ("Tilai field", "field"),
    ("Hesatoli", "village"),
    ("Lalgutwa", "village"),
    ("Chandwatoli", "village"),
    ("Boreya", "village"),
    ("Sukurtoli", "village"),
    ("Jojotoli", "village"),
    ("Hundrutoli", "village"),
    ("Pipratoli", "village"),
    ("Bandh pond", "pond"),
    ("Dobha pond", "pond"),
    ("Garha pond", "pond"),
    ("Kanchi nala", "stream"),
    ("Sapahi nala", "stream"),
    ("Mahuatand grove", "grove"),
    ("Barhi road", "road"),
    ("Tetar chowk", "road"),
    ("Gitilpidi road", "road"),
    ("Kadamtoli", "village"),
    ("Baridih", "village"),
    ("Simlia field", "field"),
    ("Nawadih", "village"),
    ("Karma field", "field"),
)
"""(name, kind) of the invented places (their points are generated)."""


@dataclass(frozen=True)
class Facet:
    """One way an observation is written, and a paraphrase of it."""

    title: str
    """Title template (``{place}``)."""
    statement: str
    """Statement template (``{place}``, ``{date}``)."""
    paraphrase: str
    """A query meaning the same with no content word in common with title, statement, tags."""


@dataclass(frozen=True)
class Topic:
    """A kind of observation at a synthetic place."""

    key: str
    """Short key."""
    tags: tuple[str, ...]
    """The items' tags."""
    facets: tuple[Facet, ...]
    """Ways of writing it."""
    ranged: bool = False
    """Items carry a valid-time range (valid_from..valid_to) instead of one day."""


TOPICS: tuple[Topic, ...] = (
    Topic(
        "flood",
        ("flood", "monsoon"),
        (
            Facet(
                "Paddy under water at {place}",
                "The paddy at {place} was under water on {date} after heavy rain.",
                "rice crop submerged following a downpour",
            ),
            Facet(
                "Embankment breached near {place}",
                "The earthen embankment near {place} breached on {date} and water spread.",
                "mud bund gave way, inundating nearby farmland",
            ),
            Facet(
                "Track covered by water at {place}",
                "Knee-deep water covered the track at {place} on {date}.",
                "lane impassable, drowned to shin height",
            ),
            Facet(
                "Houses waterlogged in {place}",
                "Several houses in {place} were waterlogged on {date}; families moved to the school.",
                "homes soaked, residents sheltered inside classrooms",
            ),
        ),
    ),
    Topic(
        "pest",
        ("pest", "crop-health"),
        (
            Facet(
                "Stem borer in the paddy at {place}",
                "Stem borer damage was found on the paddy at {place} on {date}.",
                "caterpillars tunnelling through rice stalks",
            ),
            Facet(
                "Locusts seen over {place}",
                "A swarm of locusts was seen over {place} on {date}.",
                "grasshopper cloud descending upon cultivated land",
            ),
            Facet(
                "Aphids on mustard at {place}",
                "Aphids covered the mustard at {place} on {date}.",
                "tiny sap-sucking insects infesting rapeseed",
            ),
            Facet(
                "Blight on potato at {place}",
                "Late blight spotted the potato leaves at {place} on {date}.",
                "tuber foliage rotting from fungal disease",
            ),
        ),
    ),
    Topic(
        "well",
        ("groundwater", "well"),
        (
            Facet(
                "Hand pump dry at {place}",
                "The hand pump at {place} gave no water on {date}.",
                "borehole yields nothing for drinking",
            ),
            Facet(
                "Dug well level low at {place}",
                "The dug well at {place} was down to 9 m below the rim on {date}.",
                "shaft nearly empty, aquifer sinking",
            ),
            Facet(
                "New tube well at {place}",
                "A new tube well was bored at {place} on {date}.",
                "fresh hole drilled to lift irrigation supply",
            ),
            Facet(
                "Salty taste from the well at {place}",
                "Villagers said the well at {place} tasted salty on {date}.",
                "brackish drinking supply reported by residents",
            ),
        ),
    ),
    Topic(
        "road",
        ("road", "access"),
        (
            Facet(
                "Potholes on the lane to {place}",
                "Deep potholes opened on the lane to {place} by {date}.",
                "craters making the route bumpy and slow",
            ),
            Facet(
                "Culvert collapsed at {place}",
                "The culvert at {place} collapsed on {date}; carts cannot cross.",
                "small bridge caved in, bullock traffic halted",
            ),
            Facet(
                "Road resurfaced at {place}",
                "The road at {place} was resurfaced with tar on {date}.",
                "fresh asphalt laid along the route",
            ),
            Facet(
                "Landslip blocks the path at {place}",
                "Earth slid onto the path at {place} on {date}.",
                "slope failure burying the walkway",
            ),
        ),
    ),
    Topic(
        "kiln",
        ("brick-kiln", "industry"),
        (
            Facet(
                "Brick kiln smoke at {place}",
                "A brick kiln at {place} was firing with thick smoke on {date}.",
                "chimney belching soot where clay blocks are baked",
            ),
            Facet(
                "Topsoil dug for bricks at {place}",
                "Topsoil was dug out of the plots at {place} for bricks on {date}.",
                "earth stripped away to mould clay blocks",
            ),
            Facet(
                "Kiln closed at {place}",
                "The brick kiln at {place} was shut down on {date}.",
                "furnace abandoned, chimney cold",
            ),
            Facet(
                "Stacks of fired bricks at {place}",
                "Stacks of fired bricks were piled at {place} on {date}.",
                "baked clay blocks heaped up awaiting trucks",
            ),
        ),
    ),
    Topic(
        "drought",
        ("drought", "dry-spell"),
        (
            Facet(
                "Dry spell at {place}",
                "No rain fell at {place} during the dry spell ending {date}.",
                "weeks without showers, parched ground",
            ),
            Facet(
                "Cracked soil at {place}",
                "The soil at {place} was cracked and bare until {date}.",
                "baked earth split open, nothing growing",
            ),
            Facet(
                "Sowing delayed at {place}",
                "Farmers at {place} delayed sowing until {date} for lack of rain.",
                "planting postponed awaiting showers",
            ),
            Facet(
                "Pond shrank at {place}",
                "The pond at {place} shrank to a puddle before {date}.",
                "tank nearly evaporated, muddy bottom exposed",
            ),
        ),
        ranged=True,
    ),
    Topic(
        "harvest",
        ("harvest", "crop"),
        (
            Facet(
                "Paddy harvest begun at {place}",
                "Paddy harvest began at {place} on {date}.",
                "reaping of rice underway",
            ),
            Facet(
                "Wheat threshed at {place}",
                "Wheat was threshed on the threshing floor at {place} on {date}.",
                "grain beaten from stalks, chaff flying",
            ),
            Facet(
                "Poor yield at {place}",
                "The yield at {place} was half the usual on {date}.",
                "output disappointing, sacks only partly filled",
            ),
            Facet(
                "Stubble burnt at {place}",
                "Stubble was burnt after harvest at {place} on {date}.",
                "leftover straw set alight once reaping ended",
            ),
        ),
    ),
    Topic(
        "cattle",
        ("livestock", "cattle"),
        (
            Facet(
                "Cattle grazing on fallow at {place}",
                "Cattle grazed the fallow plots at {place} on {date}.",
                "cows munching idle pasture",
            ),
            Facet(
                "Foot and mouth disease at {place}",
                "Foot and mouth disease was reported in the herd at {place} on {date}.",
                "hoof sores spreading among cows",
            ),
            Facet(
                "Goats stray into crops at {place}",
                "Stray goats ate the young crops at {place} on {date}.",
                "wandering kids nibbling seedlings",
            ),
            Facet(
                "Cattle shed built at {place}",
                "A new cattle shed was built at {place} on {date}.",
                "barn erected for cows",
            ),
        ),
    ),
)
"""Topics observed at synthetic places (the place and time cases draw on these)."""


@dataclass(frozen=True)
class Feature:
    """A named feature of the sample (its manifest) and ways of naming it without its name."""

    name: str
    """The feature's name in the manifest (resolved by where_is)."""
    feature_id: str
    """Its manifest id."""
    descriptions: tuple[str, ...]
    """Phrases that point at it without naming it."""
    topics: tuple[str, ...]
    """Keys of :data:`FEATURE_TOPICS` observed there."""


FEATURES: tuple[Feature, ...] = (
    Feature(
        "Kanke Lake",
        "kanke-lake",
        ("the reservoir north-east of the town", "the big lake beside the market town"),
        ("water_level", "fishing", "waste"),
    ),
    Feature(
        "Jumar River",
        "jumar-river",
        ("the river crossing the area north to south", "the river running north to south"),
        ("water_level", "sand", "fishing"),
    ),
    Feature(
        "Pithoria Sal Forest",
        "pithoria-forest",
        ("the sal forest in the north-west", "the woods in the north-west corner"),
        ("fire", "grazing", "felling"),
    ),
    Feature(
        "Kanke Bazar",
        "kanke-bazar",
        ("the market town in the south-east", "the town in the south-east"),
        ("waste", "construction", "traffic"),
    ),
    Feature(
        "Kanke Reference Field",
        "kanke-reference-field",
        ("the irrigated field with two crops a year", "the field that grows kharif and rabi"),
        ("fire", "grazing", "construction"),
    ),
)
"""The sample's named features (pipelines/sample/_scene.py) used by the name cases."""

FEATURE_TOPICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "water_level": (
        "Water level reading",
        ("water-level", "gauge"),
        "The gauge read {n} m of water on {date}.",
    ),
    "fishing": (
        "Fishing nets seen",
        ("fishing",),
        "Fishing nets were set out along the bank on {date}.",
    ),
    "waste": (
        "Garbage dumped",
        ("waste", "litter"),
        "Garbage and plastic bags were dumped by the edge on {date}.",
    ),
    "sand": (
        "Sand mining",
        ("sand-mining",),
        "Tractors were loading sand from the bed on {date}.",
    ),
    "fire": (
        "Fire seen",
        ("fire",),
        "A ground fire burnt the dry undergrowth on {date}.",
    ),
    "grazing": (
        "Goats grazing",
        ("grazing", "livestock"),
        "A herd of goats grazed there on {date}.",
    ),
    "felling": (
        "Trees felled",
        ("felling", "timber"),
        "Several trees were cut and logs stacked on {date}.",
    ),
    "construction": (
        "Construction started",
        ("construction",),
        "Foundations were dug for a new building on {date}.",
    ),
    "traffic": (
        "Traffic jam",
        ("traffic",),
        "Lorries and buses stood in a long jam on {date}.",
    ),
}
"""(title, tags, statement template with ``{date}`` and ``{n}``) of observations at features."""

DECISIONS: tuple[tuple[str, str, str], ...] = (
    (
        "decision",
        "Flood reports need a photo",
        "A flood report is kept only with a photo attached.",
    ),
    (
        "decision",
        "Water level in metres",
        "Water levels are recorded in metres above the gauge zero.",
    ),
    (
        "decision",
        "Harvest dates from farmers",
        "Harvest dates are taken from farmers, not guessed.",
    ),
    (
        "constraint",
        "No field visits in heavy rain",
        "Field visits stop when heavy rain is forecast.",
    ),
    (
        "decision",
        "Pest sightings tagged crop-health",
        "Every pest sighting carries the crop-health tag.",
    ),
    (
        "contract",
        "Road reports name the culvert",
        "A road report names the culvert or bridge it concerns.",
    ),
    ("decision", "Brick kiln list kept monthly", "The brick kiln list is reviewed once a month."),
    ("constraint", "Well depth from the rim", "Well depths are measured from the rim, in metres."),
    ("decision", "Cattle counts by herd", "Cattle are counted per herd, not per owner."),
    (
        "architecture",
        "Reports go through the field app",
        "Field reports reach the store through the app.",
    ),
    (
        "decision",
        "Drought declared after 21 dry days",
        "A dry spell becomes a drought after 21 days without rain.",
    ),
    (
        "implementation",
        "Gauge photos resized",
        "Gauge photos are resized to 1024 px before upload.",
    ),
    (
        "decision",
        "Fire reports checked against NDVI",
        "Fire reports are checked against the NDVI drop.",
    ),
    (
        "constraint",
        "Sand mining reported to the block office",
        "Sand mining is reported to the block office.",
    ),
    ("decision", "Traffic counts only on market days", "Traffic is counted on market days only."),
    (
        "decision",
        "Construction sites photographed",
        "Each construction site is photographed monthly.",
    ),
    ("contract", "Garbage reports give a location", "Garbage reports carry a location and a date."),
    (
        "decision",
        "Paddy varieties recorded",
        "The paddy variety is recorded with each harvest report.",
    ),
    (
        "constraint",
        "Embankment repairs need approval",
        "Embankment repairs need the engineer's approval.",
    ),
    (
        "decision",
        "Fishing permits checked",
        "Fishing on the reservoir needs a permit; checks are logged.",
    ),
)
"""(type, title, statement) of placeless items."""
