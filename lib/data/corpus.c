/* The default corpus: deterministic, English-like text from a small grammar of
 * our own (no download, no copied text).
 *
 * Why this shape: a byte-level GPT should see its loss fall quickly, so the
 * text has strong local structure (a few hundred recurring words, fixed
 * phrases, capitals after full stops, quotes around speech) and some longer
 * range structure (each paragraph keeps one protagonist, one object and one
 * place, referred back to by name or pronoun). Every choice is drawn from a
 * splitmix64 stream, so the text never repeats with a period, and the same
 * seed always gives the same bytes on every machine. */
#include "data/data.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------ */
/* vocabulary                                                          */

static const char *const names_she[] = {"Ada",  "Cora", "Edda", "Greta", "Ines", "Lina",
                                        "Nora", "Pia",  "Rosa", "Tova",  "Vera", "Wren",
                                        "Yara", "Ilse", "Mira"};
static const char *const names_he[] = {"Bram", "Dov", "Finn", "Hal",  "Jory", "Kael",
                                       "Milo", "Oren", "Sten", "Ulf", "Zeb",  "Otto",
                                       "Tam",  "Emil", "Lars"};
static const char *const roles[] = {
    "miller", "weaver",   "baker",  "captain",  "fisher",    "smith",  "shepherd",
    "potter", "teacher",  "farmer", "sailor",   "painter",   "gardener", "hunter",
    "doctor", "carpenter", "singer", "merchant", "guard",    "keeper"};
/* things, with regular plurals (+s) */
static const char *const things[] = {
    "lantern", "basket", "boat",   "candle", "letter", "map",     "key",    "stone",
    "apple",   "bell",   "book",   "coat",   "cup",    "drum",    "feather", "flag",
    "hat",     "kettle", "ladder", "lamp",   "rope",   "ring",    "seed",   "shell",
    "spoon",   "stick",  "table",  "wagon",  "window", "cart",    "barrel", "blanket",
    "bottle",  "bucket", "button", "coin",   "flower", "hammer",  "jar",    "kite",
    "mirror",  "needle", "pebble", "pillow", "ribbon", "saddle",  "scarf",  "shovel",
    "thread",  "whistle", "wheel", "clock",  "chair",  "pencil",  "net",    "sail",
    "oar",     "loaf",   "plate",  "tool"};
static const char *const animals[][2] = {
    {"fox", "foxes"},   {"crow", "crows"},   {"goat", "goats"},   {"owl", "owls"},
    {"cat", "cats"},    {"dog", "dogs"},     {"hare", "hares"},   {"mouse", "mice"},
    {"horse", "horses"}, {"duck", "ducks"},  {"bee", "bees"},     {"frog", "frogs"},
    {"wolf", "wolves"}, {"deer", "deer"},    {"sheep", "sheep"},  {"heron", "herons"},
    {"badger", "badgers"}, {"otter", "otters"}};
static const char *const places[] = {
    "the harbor", "the mill",   "the market",     "the old bridge", "the north wood",
    "the hill",   "the village", "the river",     "the well",       "the orchard",
    "the bakery", "the school", "the tower",      "the meadow",     "the shore",
    "the kitchen", "the barn",  "the lighthouse", "the square",     "the station",
    "the valley", "the forest", "the chapel",     "the inn",        "the east gate",
    "the garden", "the pond",   "the workshop"};
static const char *const preps[] = {"near",   "beside", "behind", "under",  "across",
                                    "inside", "outside", "past",  "toward", "along"};
static const char *const thing_adjs[] = {
    "red",    "blue",   "green",  "old",    "new",    "small",  "large",  "bright",
    "dark",   "warm",   "cold",   "heavy",  "light",  "round",  "tall",   "soft",
    "hard",   "broken", "golden", "silver", "wooden", "clean",  "dusty",  "empty",
    "full",   "strange", "tiny",  "ancient", "simple", "shiny", "rusty",  "yellow",
    "white",  "black",  "painted", "grey",  "striped", "crooked", "smooth", "famous"};
static const char *const person_adjs[] = {
    "quiet",   "brave",  "tired",  "hungry", "happy",  "careful", "clever",
    "proud",   "sleepy", "shy",    "kind",   "curious", "lucky",  "patient",
    "cheerful", "young", "old",    "busy",   "gentle", "stubborn"};
/* {base, past} */
static const char *const verbs_t[][2] = {
    {"carry", "carried"}, {"find", "found"},     {"paint", "painted"},   {"open", "opened"},
    {"close", "closed"},  {"fix", "fixed"},      {"build", "built"},     {"clean", "cleaned"},
    {"hold", "held"},     {"sell", "sold"},      {"buy", "bought"},      {"lose", "lost"},
    {"bring", "brought"}, {"hide", "hid"},       {"lift", "lifted"},     {"pull", "pulled"},
    {"push", "pushed"},   {"wash", "washed"},    {"mend", "mended"},     {"fill", "filled"},
    {"drop", "dropped"},  {"watch", "watched"},  {"follow", "followed"}, {"draw", "drew"},
    {"count", "counted"}, {"polish", "polished"}, {"wrap", "wrapped"},   {"keep", "kept"},
    {"take", "took"},     {"borrow", "borrowed"}, {"return", "returned"}, {"carve", "carved"},
    {"weigh", "weighed"}, {"guard", "guarded"},  {"move", "moved"},      {"check", "checked"},
    {"throw", "threw"},   {"catch", "caught"},   {"measure", "measured"}, {"share", "shared"}};
static const char *const verbs_i[][2] = {
    {"sleep", "slept"},   {"laugh", "laughed"},   {"wait", "waited"},     {"sing", "sang"},
    {"run", "ran"},       {"walk", "walked"},     {"rest", "rested"},     {"smile", "smiled"},
    {"listen", "listened"}, {"wander", "wandered"}, {"whistle", "whistled"}, {"sit", "sat"},
    {"dance", "danced"},  {"hurry", "hurried"},   {"shout", "shouted"},   {"sigh", "sighed"},
    {"read", "read"},     {"work", "worked"},     {"pause", "paused"},    {"climb", "climbed"},
    {"swim", "swam"},     {"nod", "nodded"},      {"shiver", "shivered"}, {"think", "thought"}};
static const char *const adverbs[] = {
    "slowly",  "quietly",  "quickly", "carefully", "happily", "softly",    "loudly",
    "gently",  "proudly",  "sadly",   "bravely",   "early",   "late",      "again",
    "together", "alone",   "suddenly", "patiently", "calmly", "for a while"};
static const char *const times[] = {
    "in the morning",  "at noon",         "in the evening", "at night",      "at dawn",
    "at dusk",         "after the rain",  "before the storm", "on the first day",
    "on market day",   "in the spring",   "in the winter",  "one cold morning",
    "that afternoon",  "the next day",    "long ago",       "every evening", "after supper"};
static const char *const connectives[] = {"Then", "After that", "Later", "So", "Soon",
                                          "At last", "Meanwhile"};
static const char *const numbers[] = {"two",   "three", "four",    "five",  "six",
                                      "seven", "eight", "several", "a few", "many"};
static const char *const colors[] = {"grey", "blue", "pink", "gold", "pale", "dark", "clear"};
static const char *const winds[] = {"cold", "warm", "strong", "gentle", "wet", "quiet"};
static const char *const say_verbs[] = {"said", "asked", "called", "whispered", "answered"};

/* ------------------------------------------------------------------ */
/* output buffer and random choices                                    */

typedef struct {
  uint64_t rng; /* splitmix64 state */
  char buf[1 << 12];
  size_t len;   /* bytes in buf */
  int cap_next; /* capitalise the next letter written */
} gen;

static uint64_t next_u64(gen *g) {
  uint64_t z = mt_splitmix64(g->rng);
  g->rng += 0x9E3779B97F4A7C15ULL;
  return z;
}
/* uniform in [0, n); the modulo bias is below 2^-50 for our n */
static size_t pick(gen *g, size_t n) { return (size_t)(next_u64(g) % n); }
static int chance(gen *g, int percent) { return (int)pick(g, 100) < percent; }
#define PICK(g, a) ((a)[pick((g), COUNT(a))])

static void put(gen *g, const char *s) {
  for (; *s; s++) {
    char c = *s;
    if (g->cap_next && c >= 'a' && c <= 'z') c = (char)(c - 'a' + 'A');
    if (c != ' ' && c != '"') g->cap_next = 0;
    if (g->len < sizeof g->buf) g->buf[g->len++] = c;
  }
}
/* " word" */
static void word(gen *g, const char *s) {
  put(g, " ");
  put(g, s);
}
/* " a word" / " an word" */
static void a_word(gen *g, const char *s) {
  word(g, strchr("aeiou", s[0]) ? "an" : "a");
  word(g, s);
}

/* ------------------------------------------------------------------ */
/* paragraphs                                                          */

/* What a paragraph is about: its protagonist, object, place and animal. */
typedef struct {
  const char *hero;
  int hero_she;
  const char *role;
  const char *thing;
  const char *thing_adj;
  const char *place;
  const char *animal, *animals;
  const char *other; /* a second character */
} story;

static void subject(gen *g, const story *st, int start) {
  int r = (int)pick(g, 100);
  if (start && r < 15) {
    put(g, "the ");
    put(g, st->role);
  } else if (r < 50) {
    put(g, st->hero);
  } else if (r < 85) {
    put(g, st->hero_she ? "she" : "he");
  } else {
    put(g, st->other);
  }
}

/* the object: mostly the paragraph's thing, sometimes another */
static void object(gen *g, const story *st) {
  if (chance(g, 60)) {
    word(g, "the");
    if (chance(g, 40)) word(g, st->thing_adj);
    word(g, st->thing);
  } else {
    if (chance(g, 50))
      word(g, "the");
    else {
      const char *adj = PICK(g, thing_adjs);
      a_word(g, adj);
      word(g, PICK(g, things));
      return;
    }
    word(g, PICK(g, things));
  }
}

static void sentence(gen *g, const story *st) {
  g->cap_next = 1;
  switch (pick(g, 13)) {
  case 0: /* Ada carried the red lantern across the harbor. */
    subject(g, st, 1);
    word(g, PICK(g, verbs_t)[1]);
    object(g, st);
    word(g, PICK(g, preps));
    word(g, st->place);
    put(g, ".");
    break;
  case 1: /* In the evening, she waited quietly. */
    put(g, PICK(g, times));
    put(g, ", ");
    subject(g, st, 0);
    word(g, PICK(g, verbs_i)[1]);
    word(g, PICK(g, adverbs));
    put(g, ".");
    break;
  case 2: /* He found the kettle and laughed. */
    subject(g, st, 1);
    word(g, PICK(g, verbs_t)[1]);
    object(g, st);
    word(g, "and");
    word(g, PICK(g, verbs_i)[1]);
    put(g, ".");
    break;
  case 3: /* The lantern was heavy, so Ada pulled it toward the mill. */
    put(g, "the ");
    put(g, st->thing);
    word(g, "was");
    word(g, PICK(g, thing_adjs));
    put(g, ", so ");
    subject(g, st, 0);
    word(g, PICK(g, verbs_t)[1]);
    word(g, "it");
    word(g, PICK(g, preps));
    word(g, st->place);
    put(g, ".");
    break;
  case 4: { /* "Where is the lantern?" asked Bram. */
    put(g, "\"");
    g->cap_next = 1;
    int kind = (int)pick(g, 4);
    if (kind == 0) {
      put(g, "where is the ");
      put(g, st->thing);
      put(g, "?\" asked ");
    } else if (kind == 1) {
      put(g, "I found");
      a_word(g, PICK(g, thing_adjs));
      word(g, PICK(g, things));
      word(g, PICK(g, preps));
      word(g, st->place);
      put(g, ",\" ");
      put(g, PICK(g, say_verbs));
      put(g, " ");
    } else if (kind == 2) {
      put(g, "let us go to ");
      put(g, st->place);
      put(g, ",\" ");
      put(g, PICK(g, say_verbs));
      put(g, " ");
    } else {
      put(g, "the ");
      put(g, st->thing);
      put(g, " is ");
      put(g, PICK(g, thing_adjs));
      put(g, ",\" said ");
    }
    put(g, chance(g, 70) ? st->hero : st->other);
    put(g, ".");
    break;
  }
  case 5: /* Ada had three wooden spoons. */
    subject(g, st, 1);
    word(g, "had");
    word(g, PICK(g, numbers));
    word(g, PICK(g, thing_adjs));
    word(g, PICK(g, things));
    put(g, "s.");
    break;
  case 6: /* There was a tiny bell beside the well. */
    put(g, "there was");
    a_word(g, PICK(g, thing_adjs));
    word(g, PICK(g, things));
    word(g, PICK(g, preps));
    word(g, st->place);
    put(g, ".");
    break;
  case 7: /* She wanted to mend the kite, but it was too cold. */
    subject(g, st, 1);
    word(g, "wanted to");
    word(g, PICK(g, verbs_t)[0]);
    word(g, "the");
    word(g, st->thing);
    put(g, ", but it was too ");
    put(g, PICK(g, thing_adjs));
    put(g, ".");
    break;
  case 8: /* He saw a fox near the pond. The fox ran away. */
    subject(g, st, 1);
    word(g, "saw");
    if (chance(g, 70)) {
      a_word(g, st->animal);
      word(g, PICK(g, preps));
      word(g, st->place);
      put(g, ". The ");
      put(g, st->animal);
      word(g, PICK(g, verbs_i)[1]);
      word(g, PICK(g, adverbs));
    } else {
      word(g, PICK(g, numbers));
      word(g, st->animals);
      word(g, PICK(g, preps));
      word(g, st->place);
    }
    put(g, ".");
    break;
  case 9: /* Then Ada went to the market with the lantern. */
    put(g, PICK(g, connectives));
    put(g, " ");
    g->cap_next = 0;
    subject(g, st, 0);
    word(g, "went to");
    word(g, PICK(g, places));
    word(g, "with the");
    word(g, st->thing);
    put(g, ".");
    break;
  case 10: /* The sky was grey and the wind was cold. */
    put(g, "the sky was ");
    put(g, PICK(g, colors));
    put(g, " and the wind was ");
    put(g, PICK(g, winds));
    put(g, ".");
    break;
  case 11: /* The baker was busy, and Ada helped with the cart. */
    put(g, "the ");
    put(g, PICK(g, roles));
    word(g, "was");
    word(g, PICK(g, person_adjs));
    put(g, ", and ");
    put(g, st->hero);
    word(g, "helped");
    word(g, "with the");
    word(g, PICK(g, things));
    put(g, ".");
    break;
  default: /* Ada was tired, so she slept. */
    put(g, st->hero);
    word(g, "was");
    word(g, PICK(g, person_adjs));
    put(g, ", so ");
    put(g, st->hero_she ? "she" : "he");
    word(g, PICK(g, verbs_i)[1]);
    word(g, PICK(g, adverbs));
    put(g, ".");
    break;
  }
}

static void paragraph(gen *g) {
  story st;
  st.hero_she = chance(g, 50);
  st.hero = st.hero_she ? PICK(g, names_she) : PICK(g, names_he);
  st.other = chance(g, 50) ? PICK(g, names_she) : PICK(g, names_he);
  if (st.other == st.hero) st.other = "the stranger";
  st.role = PICK(g, roles);
  st.thing = PICK(g, things);
  st.thing_adj = PICK(g, thing_adjs);
  st.place = PICK(g, places);
  size_t a = pick(g, COUNT(animals));
  st.animal = animals[a][0];
  st.animals = animals[a][1];

  /* opening: who, what, where */
  g->cap_next = 1;
  put(g, st.hero);
  put(g, " the ");
  put(g, st.role);
  word(g, "lived");
  word(g, PICK(g, preps));
  word(g, st.place);
  put(g, " and had");
  a_word(g, st.thing_adj);
  word(g, st.thing);
  put(g, ".");
  int n = 2 + (int)pick(g, 5); /* 3..7 sentences in all */
  for (int i = 0; i < n; i++) {
    put(g, " ");
    sentence(g, &st);
  }
  put(g, "\n");
}

int mt_corpus_generate(const char *path, size_t nbytes, uint64_t seed, mt_err *e) {
  if (nbytes == 0) {
    mt_err_set(e, "%s: corpus size must be at least 1 byte", path);
    return -1;
  }
  FILE *f = fopen(path, "wb");
  if (!f) {
    mt_err_set(e, "%s: cannot create: %s", path, strerror(errno));
    return -1;
  }
  gen g;
  memset(&g, 0, sizeof g);
  g.rng = seed;
  size_t written = 0;
  int bad = 0;
  /* Whole paragraphs, then the last one cut so the file is exactly nbytes and
   * ends in a newline. A paragraph is far below the buffer size. */
  while (written < nbytes && !bad) {
    g.len = 0;
    paragraph(&g);
    size_t take = g.len;
    if (written + take >= nbytes) {
      take = nbytes - written;
      g.buf[take - 1] = '\n';
    }
    if (fwrite(g.buf, 1, take, f) != take) bad = 1;
    written += take;
  }
  if (fclose(f) != 0) bad = 1;
  if (bad) {
    mt_err_set(e, "%s: write failed: %s", path, strerror(errno));
    remove(path);
    return -1;
  }
  return 0;
}
