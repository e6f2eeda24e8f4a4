"""Generates ``long_memory.json``: the long-lived memory of one user and questions about it.

    .venv/bin/python benchmarks/recall_data/make_dataset.py   # rewrites long_memory.json

Deterministic (seeded, no network): the same file comes out every time. The user is Daniel
Costa, a staff engineer at a logistics company in Lisbon, married to Chen Yu, two children,
a dog, parents in Porto and in-laws in Chengdu, a Shenzhen office and an Osaka partner. His
memory holds :data:`N_FACTS` facts as an agent's memory updater writes them (third person,
no subject: "Prefers pnpm over npm for …", "Daughter Mia starts …") over many topics: work
(projects, services, colleagues, tools), family, travel, food, health, hobbies, schedule,
goals, habits, corrections, and a dated log of what happened. About 15 % of them are in
Chinese or Japanese, as a bilingual user's are.

Distractors are built in, not added: every kind of fact is written for many entities (ten
facts about each of 30 projects, six about each of 60 colleagues…), so the facts next to an
answer share its words ("deploys", "prefers … over", the project's name).

Each question is a turn the user might open a conversation with, with the ids of the 1 to 3
facts that answer it (``evidence``). ``kind`` is ``lexical`` (the question shares the answer's
key words) or ``paraphrased`` (synonyms, the entity described instead of named: few words in
common with the answer); ``lang`` is ``en``, ``zh`` or ``ja``.

Confidences (0.70-1.00) and creation times are drawn for every fact alike, before the
questions are chosen: being evidence says nothing about a fact's confidence or age, so the
unranked block (highest confidence first) holds answers only by chance.

:func:`extra_facts` makes more facts of the same kinds (the dated log), distinct from the
file's, for benchmarks that need a larger memory than the file holds.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

SEED = 22
N_FACTS = 3000
N_QUESTIONS = 300
CJK_SHARE = 0.15
PARAPHRASED_SHARE = 0.35
OUT = Path(__file__).resolve().parent / "long_memory.json"
NOW = datetime(2026, 11, 30, 18, 0, tzinfo=timezone.utc)  # the memory's "today"

MONTHS = [
    *("January", "February", "March", "April", "May", "June", "July"),
    *("August", "September", "October", "November", "December"),
]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
ZH_WEEKDAYS = ["一", "二", "三", "四", "五", "六", "日"]
JA_WEEKDAYS = ["月", "火", "水", "木", "金", "土", "日"]

# the world ------------------------------------------------------------------------------------

# (name, what it is, that description paraphrased)
PROJECTS = [
    ("Kestrel", "shipment tracking API", "service that tells customers where their parcels are"),
    ("Atlas", "route planning engine", "system that works out the trucks' itineraries"),
    ("Harbor", "customs document service", "thing that generates the border paperwork"),
    ("Ledger", "billing and invoicing backend", "system that charges our customers"),
    ("Beacon", "driver mobile app", "phone application the truckers use"),
    ("Quill", "internal documentation site", "wiki where the engineers write things down"),
    ("Nimbus", "data warehouse loader", "job that copies production data for analytics"),
    ("Orchard", "customer dashboard", "web portal our clients log into"),
    ("Relay", "webhook delivery service", "component that pushes event callbacks to partners"),
    ("Tundra", "cold-chain sensor ingestion", "pipeline reading fridge temperatures in trailers"),
    ("Falcon", "fraud scoring model", "classifier that flags suspicious orders"),
    ("Juniper", "feature flag service", "toggle system for turning features on and off"),
    ("Marlin", "port scheduling tool", "app that books slots at container terminals"),
    ("Pebble", "design system", "shared UI component library"),
    ("Sierra", "warehouse robot controller", "software steering the picking robots"),
    ("Vector", "geocoding cache", "layer that turns addresses into coordinates cheaply"),
    ("Willow", "HR onboarding portal", "site new employees fill their paperwork in"),
    ("Zephyr", "notification service", "system sending emails, SMS and push messages"),
    ("Cobalt", "authentication gateway", "login and token front door for every API"),
    ("Drift", "ETA prediction model", "machine learning piece guessing arrival times"),
    ("Granite", "Postgres backup tooling", "scripts that snapshot and restore the databases"),
    ("Lumen", "observability stack", "metrics, traces and dashboards setup"),
    ("Mosaic", "partner integration SDK", "library that carriers embed to talk to us"),
    ("Onyx", "operations CLI", "command-line tool the ops people run"),
    ("Prism", "A/B testing platform", "experimentation framework for product changes"),
    ("Quarry", "log search service", "place where we grep through application logs"),
    ("Rook", "chess engine side project", "hobby program that plays chess"),
    ("Sprout", "kids' reading app side project", "little app that helps children learn to read"),
    ("Tern", "personal budget tracker", "home spreadsheet replacement for family money"),
    ("Umbra", "home automation scripts", "code that runs the lights and heating at home"),
]
LANGS = ["Go", "Rust", "Python", "TypeScript", "Kotlin", "Elixir", "Java", "Scala", "C#", "Ruby"]
CLOUDS = [
    ("AWS eu-west-1", "Amazon's Irish region"),
    ("Google Cloud europe-west4", "Google's Dutch region"),
    ("Hetzner Falkenstein", "the German bare-metal host"),
    ("Fly.io", "the Fly platform"),
    ("Azure West Europe", "Microsoft's Amsterdam region"),
    ("a Kubernetes cluster in the Lisbon office", "the on-premises cluster"),
]
CIS = ["GitHub Actions", "GitLab CI", "Buildkite", "CircleCI", "Jenkins", "Argo CD"]
DBS = ["PostgreSQL", "MySQL", "SQLite", "DynamoDB", "ClickHouse", "MongoDB", "Redis", "Cassandra"]
PMS = [("pnpm", "npm"), ("npm", "yarn"), ("yarn", "pnpm"), ("bun", "npm"), ("pnpm", "yarn")]
TEST_TOOLS = ["pytest", "Jest", "Vitest", "go test", "cargo nextest", "JUnit", "Playwright"]
CAUSES = [
    "an expired TLS certificate",
    "a full disk on the primary database",
    "a bad feature flag rollout",
    "a DNS misconfiguration",
    "a memory leak in the connection pool",
    "an unindexed query after a migration",
    "a certificate rotation that skipped one node",
    "a runaway cron job",
    "a dependency upgrade that changed time zones",
    "rate limiting by an upstream partner",
]
FORGES = ["GitHub", "GitLab", "Gitea"]
CODE_STYLES = [
    "type hints on every public function",
    "small pull requests under 400 lines",
    "tests next to the code they cover",
    "no ORMs, plain SQL in repository modules",
    "structured logging with request ids",
    "errors wrapped with context, never swallowed",
    "feature flags for anything user-visible",
    "one migration per pull request",
]

FIRST = [
    *("Ana", "Bruno", "Carla", "Diogo", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jakub"),
    *("Kofi", "Laura", "Marek", "Nadia", "Oscar", "Priya", "Quentin", "Rosa", "Samir", "Tanja"),
    *("Ugo", "Vera", "Wes", "Ximena", "Yusuf", "Zara", "Amir", "Beatriz", "Cyril", "Dalia"),
    *("Emil", "Fatima", "Goran", "Hana", "Ivo", "Joana", "Karim", "Lena", "Mateo", "Nora"),
    *("Omar", "Paula", "Rafael", "Sara", "Teo", "Uma", "Viktor", "Wanda", "Yara", "Zoltan"),
    *("Aiko", "Björn", "Chloé", "Dmitri", "Esra", "Felix", "Gianna", "Hiro", "Isla", "Jonah"),
]
LAST = [
    *("Ribeiro", "Novak", "Okafor", "Lindqvist", "Moreau", "Haddad", "Kowalski", "Santos"),
    *("Fischer", "Petrov", "Alvarez", "Nakamura", "Byrne", "Mensah", "Rossi", "Duarte"),
    *("Keller", "Varga", "Oliveira", "Dubois", "Schmidt", "Kaya", "Horvat", "Silva"),
]
ROLES = [
    ("engineering manager", "boss"),
    ("product manager", "person who decides the roadmap"),
    ("tech lead", "most senior engineer who sets direction"),
    ("site reliability engineer", "person keeping production up"),
    ("data scientist", "statistics and modelling person"),
    ("QA engineer", "tester"),
    ("designer", "person who draws the screens"),
    ("security engineer", "person worried about vulnerabilities"),
    ("staff engineer", "senior architect"),
    ("backend engineer", "server-side developer"),
]
TEAMS = ["Platform", "Payments", "Routing", "Mobile", "Data", "Customs", "Growth", "Warehouse"]
CITIES = [
    ("Lisbon", 0),
    ("Porto", 0),
    ("Berlin", 1),
    ("Warsaw", 1),
    ("Nairobi", 3),
    ("Bangalore", 5),
    ("Shenzhen", 8),
    ("Osaka", 9),
    ("São Paulo", -3),
    ("Toronto", -5),
    ("Dublin", 0),
    ("Madrid", 1),
    ("Athens", 2),
    ("Istanbul", 3),
]
CHANNELS = ["Slack", "email", "a phone call", "a Zoom call", "a GitHub comment", "Signal"]
TOPICS = [
    ("Kubernetes networking", "k8s network problems"),
    ("PostgreSQL query tuning", "slow SQL statements"),
    ("Terraform modules", "infrastructure as code"),
    ("React performance", "a sluggish web frontend"),
    ("OAuth and OpenID Connect", "single sign-on troubles"),
    ("Kafka consumers", "event streaming lag"),
    ("iOS release signing", "getting the iPhone build into the App Store"),
    ("GDPR requests", "privacy law questions"),
    ("pricing rules", "how we compute what customers pay"),
    ("map tiles", "rendering the maps"),
    ("gRPC contracts", "service interface definitions"),
    ("on-call rotations", "who carries the pager"),
    ("load testing", "stress-testing before a launch"),
    ("Bazel builds", "the build system"),
    ("LLM evaluation", "measuring chatbot quality"),
]
DIETS = ["vegetarian", "vegan", "gluten-free", "halal", "lactose intolerant", "pescatarian"]

# (task, preferred, other, task paraphrased)
TOOL_PREFS = [
    ("JavaScript package management", "pnpm", "npm", "installing node dependencies"),
    ("Python virtual environments", "uv", "poetry", "isolating a Python project's libraries"),
    ("formatting Python code", "ruff format", "black", "auto-styling .py files"),
    ("the terminal emulator", "WezTerm", "iTerm2", "the console window app"),
    ("writing notes", "Obsidian", "Notion", "keeping a personal knowledge base"),
    ("diagrams", "Excalidraw", "draw.io", "sketching architecture pictures"),
    ("local Kubernetes", "kind", "minikube", "running a cluster on the laptop"),
    ("container builds", "Podman", "Docker Desktop", "building images"),
    ("database GUIs", "DBeaver", "pgAdmin", "browsing tables visually"),
    ("HTTP debugging", "httpie", "Postman", "poking at REST endpoints"),
    ("shell", "fish", "zsh", "the command interpreter"),
    ("password management", "1Password", "Bitwarden", "storing credentials"),
    ("browser", "Firefox", "Chrome", "surfing the web"),
    ("code search", "ripgrep", "grep", "finding text across a repository"),
    ("dotfiles", "chezmoi", "GNU stow", "syncing configuration files between machines"),
    ("API documentation", "Redoc", "Swagger UI", "rendering OpenAPI specs"),
    ("load testing", "k6", "JMeter", "hammering a service with traffic"),
    ("task tracking", "Linear", "Jira", "managing tickets"),
    ("video calls", "Google Meet", "Zoom", "online meetings"),
    ("screen recording", "OBS", "Loom", "capturing a demo video"),
    ("email", "Fastmail", "Gmail", "the mail provider"),
    ("music streaming", "Tidal", "Spotify", "listening to songs online"),
    ("Rust error handling", "thiserror", "anyhow", "defining failure types in Rust crates"),
    ("Go HTTP routers", "chi", "gin", "routing web requests in Go"),
    ("frontend state", "Zustand", "Redux", "managing React application state"),
    ("CSS", "Tailwind", "CSS modules", "styling web pages"),
    ("static sites", "Astro", "Hugo", "building a blog"),
    ("git history", "rebase and squash", "merge commits", "integrating branches"),
    ("infrastructure code", "OpenTofu", "Pulumi", "provisioning cloud resources"),
    ("secrets in CI", "SOPS", "plain environment variables", "keeping tokens out of the repo"),
    ("Python type checking", "pyright", "mypy", "static analysis of annotations"),
    ("editors", "Neovim", "VS Code", "the program he writes code in"),
    ("keyboard layout", "Colemak", "QWERTY", "arranging the keys"),
    ("laptops", "a ThinkPad running Fedora", "a MacBook", "the work computer"),
    ("calendar", "Fantastical", "Outlook", "scheduling appointments"),
    ("backups", "restic", "Time Machine", "saving copies of his files"),
]

FAMILY = {
    "wife": ("Chen Yu", "Yu"),
    "daughter": ("Mia", "Mia"),
    "son": ("Tomás", "Tomás"),
    "mother": ("Helena", "Helena"),
    "father": ("Rui", "Rui"),
    "sister": ("Clara", "Clara"),
    "brother-in-law": ("Jonas", "Jonas"),
    "niece": ("Lina", "Lina"),
    "best friend": ("Pedro", "Pedro"),
    "neighbour": ("Mrs Albuquerque", "Mrs Albuquerque"),
}
# relation -> (how a user says it without the name)
FAMILY_PARA = {
    "wife": "my spouse",
    "daughter": "my little girl",
    "son": "my boy",
    "mother": "my mum",
    "father": "my dad",
    "sister": "my sibling",
    "brother-in-law": "Clara's husband",
    "niece": "my sister's kid",
    "best friend": "my closest mate",
    "neighbour": "the old lady next door",
}
ALLERGENS = [
    *("peanuts", "shellfish", "penicillin", "cats", "pollen", "eggs", "kiwi", "dust mites"),
    *("wasp stings", "sesame"),
]
GIFTS = [
    "LEGO Technic sets",
    "watercolour paints",
    "jazz vinyl records",
    "single-origin coffee",
    "gardening tools",
    "detective novels",
    "board games",
    "silk scarves",
    "a new road bike helmet",
    "dinosaur books",
]
ACTIVITIES = [
    ("swimming lessons", "the pool"),
    ("ballet class", "dance"),
    ("football practice", "soccer"),
    ("piano lessons", "music practice"),
    ("Chinese school", "Mandarin classes"),
    ("judo", "martial arts"),
    ("choir rehearsal", "singing"),
    ("pottery class", "ceramics"),
]

TRIP_CITIES = [
    *("Tokyo", "Kyoto", "Chengdu", "Berlin", "Madrid", "Copenhagen", "Edinburgh", "Vienna"),
    *("Prague", "Marrakesh", "Seville", "Ljubljana", "Amsterdam", "Bologna", "Tallinn"),
    *("Reykjavik", "Istanbul", "Montreal", "Singapore", "Hanoi", "Cape Town", "Lima"),
]
TRIP_REASONS = [
    ("a conference talk", "giving a presentation"),
    ("a customer workshop", "meeting a client"),
    ("a family holiday", "vacation with the kids"),
    ("the company offsite", "the team retreat"),
    ("a friend's wedding", "a marriage celebration"),
    ("visiting the in-laws", "seeing Yu's parents"),
    ("a hiking week", "walking in the mountains"),
]
HOTEL_WORDS = ["Grand", "Garden", "Harbour", "Old Town", "River", "Station", "Park", "Loft"]
AIRLINES = ["TAP", "Lufthansa", "KLM", "Air France", "Iberia", "Finnair", "Turkish Airlines"]

CUISINES = [
    ("Sichuan", "spicy Chinese"),
    ("Japanese ramen", "noodle soup"),
    ("Portuguese seafood", "fish and shellfish"),
    ("Italian", "pasta and pizza"),
    ("Lebanese", "mezze"),
    ("Indian", "curry"),
    ("Korean barbecue", "grill-your-own meat"),
    ("vegetarian", "meat-free"),
    ("Mexican", "tacos"),
    ("Ethiopian", "injera"),
]
RESTAURANT_WORDS = [
    *("Lotus", "Tasca", "Casa", "Bento", "Cedar", "Saffron", "Maru", "Taqueria", "Trattoria"),
    *("Ember", "Bamboo", "Azulejo", "Olive", "Panda", "Koi", "Fado"),
]
DISLIKED_FOODS = [
    *("coriander", "olives", "blue cheese", "liver", "anchovies", "tripe", "licorice"),
    *("durian", "okra", "raw onion"),
]
DRINKS = [
    ("a flat white with oat milk", "coffee order"),
    ("jasmine green tea", "tea"),
    ("sparkling water with lemon", "fizzy water"),
    ("a Super Bock", "beer"),
]

MEDS = [
    ("vitamin D", "1000 IU with breakfast"),
    ("an antihistamine", "in the pollen season, every evening"),
    ("omega-3", "after lunch"),
    ("magnesium", "before bed"),
]
INJURIES = [("left knee", "knee"), ("lower back", "back"), ("right shoulder", "shoulder")]
SPORTS = [
    ("padel", "racket sport"),
    ("bouldering", "climbing"),
    ("5-a-side football", "football"),
    ("road cycling", "bike rides"),
    ("trail running", "running in the hills"),
    ("swimming laps", "the pool"),
]
BOOKS = [
    ("The Pragmatic Programmer", "Andrew Hunt"),
    ("Designing Data-Intensive Applications", "Martin Kleppmann"),
    ("The Three-Body Problem", "Liu Cixin"),
    ("Blindness", "José Saramago"),
    ("Project Hail Mary", "Andy Weir"),
    ("Thinking in Systems", "Donella Meadows"),
    ("Norwegian Wood", "Haruki Murakami"),
    ("The Book of Disquiet", "Fernando Pessoa"),
    ("Piranesi", "Susanna Clarke"),
    ("A Philosophy of Software Design", "John Ousterhout"),
    ("Educated", "Tara Westover"),
    ("Klara and the Sun", "Kazuo Ishiguro"),
]
MEETINGS = [
    ("architecture review", "design discussion"),
    ("one-on-one", "private catch-up"),
    ("incident retro", "post-mortem"),
    ("sprint planning", "iteration kickoff"),
    ("hiring sync", "recruiting meeting"),
    ("roadmap review", "quarterly priorities meeting"),
]
BUGS = [
    "race condition",
    "off-by-one error",
    "time zone bug",
    "memory leak",
    "N+1 query",
    "deadlock",
    "Unicode normalisation bug",
    "retry storm",
    "stale cache entry",
    "integer overflow",
]
ITEMS = [
    ("a standing desk", "IKEA"),
    ("noise-cancelling headphones", "Fnac"),
    ("a mechanical keyboard", "Keychron"),
    ("running shoes", "Decathlon"),
    ("a cargo bike", "a shop in Alcântara"),
    ("an espresso machine", "Worten"),
    ("a tent", "Decathlon"),
    ("a 4K monitor", "Amazon"),
    ("a rice cooker", "an Asian market in Martim Moniz"),
    ("a drone", "Fnac"),
]
DISHES = [
    *("mapo tofu", "bacalhau à brás", "dumplings", "risotto", "shakshuka", "pad thai"),
    *("francesinha", "ramen", "caldo verde", "lasagne", "paella", "hot pot"),
]
ROUTES = [
    "the Tagus riverside",
    "Monsanto park",
    "the Cascais coast path",
    "the Sintra hills",
    "the Belém waterfront",
]

# Chinese and Japanese
ZH_COLLEAGUES = [
    ("王磊", "测试"),
    ("李娜", "前端"),
    ("张伟", "运维"),
    ("刘洋", "数据分析"),
    ("陈静", "产品"),
    ("杨帆", "后端"),
    ("赵敏", "设计"),
    ("黄强", "安全"),
    ("周婷", "移动端"),
    ("吴昊", "算法"),
]
ZH_CITIES = ["成都", "深圳", "上海", "北京", "杭州", "西安", "广州", "重庆", "苏州", "厦门"]
ZH_FOODS = [
    "火锅",
    "麻婆豆腐",
    "饺子",
    "小笼包",
    "担担面",
    "回锅肉",
    "烤鸭",
    "酸菜鱼",
    "肠粉",
    "凉皮",
]
ZH_TEAS = ["龙井", "铁观音", "普洱", "碧螺春", "大红袍", "茉莉花茶"]
ZH_ACTIVITIES = ["打太极", "练书法", "下象棋", "跳广场舞", "种花", "钓鱼", "唱京剧", "打麻将"]
ZH_INLAWS = [("岳父", "陈建国"), ("岳母", "刘芳"), ("小舅子", "陈浩"), ("表妹", "陈晓")]
ZH_INLAW_PARA = {"岳父": "老丈人", "岳母": "丈母娘", "小舅子": "妻子的弟弟", "表妹": "表亲"}
JA_PLACES = ["大阪", "京都", "奈良", "神戸", "東京", "福岡", "札幌", "名古屋"]
JA_COLLEAGUES = [
    ("田中", "物流"),
    ("鈴木", "経理"),
    ("高橋", "開発"),
    ("佐藤", "営業"),
    ("伊藤", "品質管理"),
]
JA_FOODS = ["ラーメン", "お好み焼き", "寿司", "たこ焼き", "うどん", "天ぷら", "焼き鳥", "カレー"]


# building -------------------------------------------------------------------------------------


@dataclass
class Question:
    text: str
    evidence: list[str]
    kind: str  # lexical | paraphrased
    lang: str  # en | zh | ja
    topic: str


@dataclass
class Candidates:
    """Questions one can ask about the memory, by language; each a pair of phrasings."""

    by_lang: dict[str, list[tuple[str, str | None, list[str], str]]] = field(
        default_factory=lambda: {"en": [], "zh": [], "ja": []}
    )

    def add(
        self, lang: str, topic: str, evidence: list[str], lexical: str, paraphrased: str | None
    ) -> None:
        self.by_lang[lang].append((lexical, paraphrased, evidence, topic))


class Memory:
    """The facts, each with an id, a category, a topic, a language."""

    def __init__(self, rng: random.Random, prefix: str = "fact") -> None:
        self.rng = rng
        self.prefix = prefix
        self.facts: list[dict] = []
        self.keys: set[str] = set()
        self.questions = Candidates()

    def add(
        self,
        content: str,
        category: str,
        topic: str,
        lang: str = "en",
        source_error: str | None = None,
    ) -> str | None:
        """The new fact's id, or None if a fact with this content exists already."""
        key = " ".join(content.casefold().split())
        if key in self.keys:
            return None
        self.keys.add(key)
        digest = hashlib.sha1(f"{self.prefix}:{key}".encode()).hexdigest()[:12]
        fact = {
            "id": f"{self.prefix}_{digest}",
            "content": content,
            "category": category,
            "topic": topic,
            "lang": lang,
        }
        if source_error:
            fact["source_error"] = source_error
        self.facts.append(fact)
        return fact["id"]

    def ask(
        self,
        lang: str,
        topic: str,
        evidence: list[str | None],
        lexical: str,
        paraphrased: str | None = None,
    ) -> None:
        if all(evidence):
            self.questions.add(lang, topic, [e for e in evidence if e], lexical, paraphrased)


def a_date(rng: random.Random, *, past_days: int = 900, future_days: int = 0) -> datetime:
    return NOW + timedelta(days=rng.randint(-past_days, future_days))


def day_month(d: datetime) -> str:
    return f"{d.day} {MONTHS[d.month - 1]}"


def day_month_year(d: datetime) -> str:
    return f"{d.day} {MONTHS[d.month - 1]} {d.year}"


def build_projects(m: Memory, colleagues: list[str]) -> None:
    rng = m.rng
    for name, desc, desc_para in PROJECTS:
        lang = rng.choice(LANGS)
        cloud, cloud_para = rng.choice(CLOUDS)
        ci = rng.choice(CIS)
        db = rng.choice(DBS)
        owner = rng.choice(colleagues)
        pm, pm_other = rng.choice(PMS)
        test = rng.choice(TEST_TOOLS)
        minutes = rng.randint(3, 45)
        cause = rng.choice(CAUSES)
        down = a_date(rng, past_days=600)
        forge = rng.choice(FORGES)
        old_db, new_db = rng.sample(DBS, 2)
        by = rng.choice(MONTHS)
        style = rng.choice(CODE_STYLES)
        slug = name.lower()
        first = owner.split()[0]

        d = m.add(f"{name} is the {desc}", "knowledge", "projects")
        lg = m.add(f"{name} is written in {lang}", "knowledge", "projects")
        dep = m.add(f"{name} deploys to {cloud} through {ci}", "knowledge", "projects")
        store = m.add(f"{name} stores its data in {db}", "knowledge", "projects")
        own = m.add(
            f"{owner} owns the {name} codebase and reviews its pull requests", "knowledge", "work"
        )
        pmf = m.add(
            f"Prefers {pm} over {pm_other} for {name}'s frontend builds", "preference", "tools"
        )
        mig = m.add(f"Wants {name} moved from {old_db} to {new_db} before {by}", "goal", "projects")
        inc = m.add(
            f"{name} went down on {day_month_year(down)} because of {cause}", "context", "projects"
        )
        tst = m.add(
            f"{name}'s test suite runs with {test} and takes about {minutes} minutes",
            "knowledge",
            "projects",
        )
        repo = m.add(
            f"{name}'s code lives in the {forge} repository freightly/{slug}", "knowledge", "work"
        )
        sty = m.add(f"In {name} code reviews, insists on {style}", "behavior", "work")

        m.ask(
            "en",
            "projects",
            [lg],
            f"Which language is {name} written in?",
            f"What programming language did we build the {desc_para} in?",
        )
        m.ask("en", "projects", [d, lg], f"Which language is the {desc} written in?")
        m.ask(
            "en",
            "projects",
            [dep],
            f"How does {name} get deployed?",
            f"Where does {name} run in production, and what ships it there?",
        )
        m.ask(
            "en",
            "projects",
            [store],
            f"Which database does {name} store its data in?",
            f"Where are the {desc_para}'s records persisted?",
        )
        m.ask(
            "en",
            "work",
            [own],
            f"Who reviews pull requests for {name}?",
            f"Whom should I ask to approve my change to the {desc_para}?",
        )
        m.ask(
            "en",
            "tools",
            [pmf],
            f"Set up the frontend build for {name}",
            f"Which JS dependency installer should the {name} UI use?",
        )
        m.ask(
            "en",
            "projects",
            [mig],
            f"What is the plan for moving {name} to {new_db}?",
            f"Is there a deadline for switching the {desc_para} to a new datastore?",
        )
        m.ask(
            "en",
            "projects",
            [inc],
            f"Why did {name} go down in {MONTHS[down.month - 1]}?",
            f"What caused the outage of the {desc_para}?",
        )
        m.ask(
            "en",
            "projects",
            [tst],
            f"How long does the {name} test suite take?",
            f"How slow is CI for the {desc_para}?",
        )
        m.ask(
            "en",
            "work",
            [repo],
            f"Where is the {name} repository?",
            f"Send me the link to the source of the {desc_para}",
        )
        m.ask(
            "en",
            "work",
            [sty, own],
            f"I'm opening a pull request on {name}: who reviews it and what will they insist on?",
            f"Before I ask {first} to look at my branch, what do reviews of it expect?",
        )
        m.ask(
            "en",
            "projects",
            [lg, store, dep],
            f"Brief a new engineer on the {name} stack: language, database, deployment",
            f"A new hire joins the team of the {desc_para}: summarise its tech for them",
        )
        m.ask(
            "en",
            "projects",
            [dep, tst],
            f"Write the CI pipeline for {name}: tests and deploy",
            f"Automate building, checking and releasing the {desc_para}",
        )
        m.ask(
            "en",
            "projects",
            [d, inc],
            f"Has the {desc} had incidents?",
            f"Was the {desc_para} ever unavailable, and why?",
        )
        # something the project needs fixed: corrections
        if rng.random() < 0.6:
            wrong = rng.choice([x for x in LANGS if x != lang])
            cor = m.add(
                f"{name} has no {wrong} code: its build is {lang} only",
                "correction",
                "projects",
                source_error=f"assumed {name} was a {wrong} project",
            )
            m.ask(
                "en",
                "projects",
                [cor, lg],
                f"Add a {wrong} build step to {name}",
                f"Compile the {desc_para} with the {wrong} toolchain",
            )


def build_colleagues(m: Memory) -> list[str]:
    rng = m.rng
    names: list[str] = []
    firsts = rng.sample(FIRST, 60)
    by_role: dict[tuple[str, str], list[tuple[str | None, str]]] = {}
    by_topic: dict[str, list[tuple[str | None, str]]] = {}
    for first in firsts:
        name = f"{first} {rng.choice(LAST)}"
        names.append(name)
        role, role_para = rng.choice(ROLES)
        team = rng.choice(TEAMS)
        city, offset = rng.choice(CITIES)
        ch, ch_other = rng.sample(CHANNELS, 2)
        topic, topic_para = rng.choice(TOPICS)
        diet = rng.choice(DIETS)
        born = a_date(rng, past_days=365)
        manager = rng.choice(names[:-1]) if len(names) > 3 else None
        tz = f"UTC{offset:+d}" if offset else "UTC"

        r = m.add(f"{name} is the {role} on the {team} team", "knowledge", "colleagues")
        loc = m.add(f"{name} works remotely from {city} ({tz})", "knowledge", "colleagues")
        com = m.add(
            f"{name} prefers {ch} over {ch_other} for quick questions", "knowledge", "colleagues"
        )
        exp = m.add(f"{name} is the go-to person for {topic}", "knowledge", "colleagues")
        food = m.add(
            f"{name} is {diet}, worth remembering for team lunches", "knowledge", "colleagues"
        )
        bday = m.add(f"{name}'s birthday is on {day_month(born)}", "knowledge", "colleagues")
        rep = None
        if manager:
            rep = m.add(f"{name} reports to {manager}", "knowledge", "colleagues")

        by_role.setdefault((role, team), []).append((r, role_para))
        m.ask(
            "en",
            "colleagues",
            [loc],
            f"Where does {name} work from?",
            f"What time is it for {first} right now, roughly?",
        )
        m.ask(
            "en",
            "colleagues",
            [com],
            f"How should I send {name} a quick question?",
            f"What's the best way to reach {first}?",
        )
        by_topic.setdefault(topic, []).append((exp, topic_para))
        m.ask(
            "en",
            "colleagues",
            [food],
            f"Plan a team lunch with {name}",
            f"Pick a restaurant {first} can eat at",
        )
        m.ask(
            "en",
            "colleagues",
            [bday],
            f"When is {name}'s birthday?",
            f"When should I send {first} a card?",
        )
        if rep:
            m.ask(
                "en",
                "colleagues",
                [r, rep],
                f"What is {name}'s role, and who do they report to?",
                f"Who is {first}'s manager?",
            )
        m.ask(
            "en",
            "colleagues",
            [loc, com],
            f"Schedule a quick sync with {name}",
            f"Ping {first} about something small at a sensible hour",
        )
    # several people may hold a role or know a topic: all of them answer (up to 3)
    for (role, team), held in by_role.items():
        if len(held) <= 3:
            m.ask(
                "en",
                "colleagues",
                [r for r, _ in held],
                f"Who is the {role} on the {team} team?",
                f"Who is the {held[0][1]} for {team}?",
            )
    for topic, held in by_topic.items():
        if len(held) <= 3:
            m.ask(
                "en",
                "colleagues",
                [e for e, _ in held],
                f"Who is the go-to person for {topic}?",
                f"Who could help me with {held[0][1]}?",
            )
    return names


def build_family(m: Memory) -> None:
    rng = m.rng
    allergens = rng.sample(ALLERGENS, len(FAMILY))
    gifts = rng.sample(GIFTS, len(FAMILY))
    for i, (relation, (name, _short)) in enumerate(FAMILY.items()):
        para = FAMILY_PARA[relation]
        born = a_date(rng, past_days=365)
        label = relation.capitalize()
        b = m.add(f"{label} {name}'s birthday is on {day_month(born)}", "knowledge", "family")
        al = m.add(f"{label} {name} is allergic to {allergens[i]}", "knowledge", "family")
        g = m.add(f"{label} {name} would love {gifts[i]} as a present", "knowledge", "family")
        m.ask(
            "en",
            "family",
            [b],
            f"When is {name}'s birthday?",
            f"When does {para} turn a year older?",
        )
        m.ask(
            "en",
            "family",
            [al],
            f"Is {name} allergic to anything?",
            f"What must {para} avoid eating or touching?",
        )
        m.ask(
            "en",
            "family",
            [b, g],
            f"Remind me of {name}'s birthday and a present idea",
            f"What should I get {para}, and by when?",
        )
        m.ask("en", "family", [al, g], f"Buying a gift for {name}: anything to avoid?")

    mia_school = m.add(
        "Daughter Mia starts primary school in Porto in September", "context", "family"
    )
    mia_act, mia_act_para = rng.choice(ACTIVITIES)
    mia_day = rng.choice(WEEKDAYS[:5])
    ma = m.add(f"Mia has {mia_act} every {mia_day} at 17:30", "context", "schedule")
    tom_act, tom_act_para = rng.choice([a for a in ACTIVITIES if a[0] != mia_act])
    tom_day = rng.choice([d for d in WEEKDAYS[:5] if d != mia_day])
    ta = m.add(
        f"Son Tomás goes to {tom_act} on {tom_day}s after kindergarten", "context", "schedule"
    )
    pick = m.add(
        f"Picks the kids up himself on {mia_day}s; Yu does the other days", "behavior", "schedule"
    )
    dog = m.add(
        "The dog Pixel is a border collie who needs a long walk every morning", "context", "family"
    )
    vet = m.add(
        "Pixel's vet is Clínica Veterinária do Areeiro; vaccinations due in March",
        "knowledge",
        "family",
    )
    sofia = m.add(
        "Wife Chen Yu is an architect who works from home on Fridays", "context", "family"
    )
    ann = m.add(
        "Wedding anniversary with Yu is on 9 June; they married in Chengdu in 2016",
        "knowledge",
        "family",
    )
    m.ask(
        "en",
        "family",
        [mia_school],
        "When does Mia start school, and where?",
        "When does my little girl begin classes?",
    )
    m.ask(
        "en",
        "schedule",
        [ma, pick],
        f"Can I take a meeting on {mia_day} at 17:00?",
        f"Am I free late afternoon on {mia_day}s?",
    )
    m.ask(
        "en",
        "schedule",
        [ta],
        f"What does Tomás do on {tom_day}s?",
        f"Where does my boy go for {tom_act_para} after kindergarten?",
    )
    m.ask(
        "en",
        "family",
        [dog, vet],
        "What does Pixel need this month?",
        "Anything to sort out for the collie's health?",
    )
    m.ask(
        "en",
        "family",
        [sofia],
        "What does Yu do for work?",
        "What's my spouse's job and where does she work?",
    )
    m.ask(
        "en", "family", [ann], "When is our wedding anniversary?", "When did Yu and I get married?"
    )


def build_tools(m: Memory) -> None:
    for task, best, other, task_para in TOOL_PREFS:
        p = m.add(f"Prefers {best} over {other} for {task}", "preference", "tools")
        m.ask(
            "en",
            "tools",
            [p],
            f"Which tool should I use for {task}?",
            f"Recommend something for {task_para}",
        )
    extra = [
        (
            "Uses a split keyboard and remaps Caps Lock to Escape",
            "Set up my keyboard config",
            "How is my typing hardware arranged?",
        ),
        (
            "Wants shell examples in fish syntax, not bash",
            "Give me a shell one-liner to rename files",
            "Write a quick command-line loop to batch-rename photos",
        ),
        (
            "Wants answers with code first, explanation after",
            "How should you format answers for me?",
            "How do I like replies laid out?",
        ),
        (
            "Runs Fedora Silverblue on the work ThinkPad",
            "Which OS is on my ThinkPad?",
            "What Linux does my work laptop run?",
        ),
        (
            "Signs git commits with an SSH key held in 1Password",
            "Set up git commit signing",
            "How do I verify authorship of my changes cryptographically?",
        ),
    ]
    for content, lex, para in extra:
        f = m.add(content, "preference", "tools")
        m.ask("en", "tools", [f], lex, para)


def build_travel(m: Memory) -> None:
    rng = m.rng
    for city in TRIP_CITIES:
        reason, reason_para = rng.choice(TRIP_REASONS)
        when = a_date(rng, past_days=800)
        hotel = f"Hotel {rng.choice(HOTEL_WORDS)} {city}"
        airline = rng.choice(AIRLINES)
        liked = rng.choice(
            [
                "loved the breakfast",
                "found the rooms too small",
                "liked the quiet courtyard",
                "complained about the noise",
            ]
        )
        t = m.add(
            f"Went to {city} in {MONTHS[when.month - 1]} {when.year} for {reason}",
            "context",
            "travel",
        )
        h = m.add(f"Stayed at {hotel} in {city} and {liked}", "context", "travel")
        fl = m.add(f"Flew {airline} to {city}", "context", "travel")
        m.ask(
            "en",
            "travel",
            [h],
            f"Which hotel did I stay at in {city}?",
            f"Where did I sleep on my {city} visit, and was it any good?",
        )
        m.ask("en", "travel", [t], f"When did I go to {city}?", f"Remind me why I visited {city}")
        m.ask(
            "en",
            "travel",
            [t, h, fl],
            f"Plan a repeat of my {city} trip: dates, hotel, airline",
            f"I want to go back to {city}: what did I do last time?",
        )
    future = [
        (
            "Flying to Berlin on 14 December for Clara's birthday; flight TP 558 at 07:10",
            "When is my flight to Berlin?",
            "When do I leave to see my sister?",
        ),
        (
            "Booked a family trip to Chengdu from 20 January to 8 February",
            "When is the Chengdu trip?",
            "When are we visiting Yu's parents?",
        ),
        (
            "Has a Schengen-free Japanese visa waiver; passport expires in August 2027",
            "When does my passport expire?",
            "Is my travel document still valid next summer?",
        ),
        (
            "Always books an aisle seat on flights longer than three hours",
            "Book my seat for the Tokyo flight",
            "Where do I like to sit on long-haul planes?",
        ),
        (
            "Keeps TAP Miles&Go number TP 3920 1184 in 1Password",
            "What is my TAP frequent flyer number?",
            "Where's my airline loyalty account?",
        ),
    ]
    for content, lex, para in future:
        f = m.add(content, "context", "travel")
        m.ask("en", "travel", [f], lex, para)


def build_food(m: Memory) -> None:
    rng = m.rng
    cities = ["Lisbon", "Porto", "Berlin", "Chengdu", "Osaka", "Madrid"]
    words = list(RESTAURANT_WORDS)
    rng.shuffle(words)
    for city in cities:
        for cuisine, cuisine_para in rng.sample(CUISINES, 4):
            kind = rng.choice(["Bistro", "House", "Bar", "Kitchen", "Corner"])
            place = f"{words.pop()} {kind}"
            f = m.add(f"Favourite {cuisine} restaurant in {city} is {place}", "preference", "food")
            m.ask(
                "en",
                "food",
                [f],
                f"Recommend a {cuisine} restaurant in {city}",
                f"Where should we eat {cuisine_para} in {city}?",
            )
            if not words:
                words = list(RESTAURANT_WORDS)
                rng.shuffle(words)
    for food in DISLIKED_FOODS:
        f = m.add(f"Dislikes {food} and asks for dishes without it", "preference", "food")
        m.ask("en", "food", [f], f"Do I like {food}?")
    for drink, para in DRINKS:
        f = m.add(f"Usually orders {drink}", "preference", "food")
        m.ask("en", "food", [f], f"What's my usual {para}?", f"Get me my usual {para}")
    veg = m.add("Eats vegetarian on weekdays and fish at weekends", "behavior", "food")
    m.ask(
        "en",
        "food",
        [veg],
        "Plan my meals for next week",
        "Suggest what I should cook on Wednesday evening",
    )


def build_health(m: Memory) -> None:
    rng = m.rng
    for med, when in MEDS:
        f = m.add(f"Takes {med} {when}", "context", "health")
        m.ask("en", "health", [f], f"When do I take {med}?")
    injury, injury_para = rng.choice(INJURIES)
    phys = m.add(
        f"Goes to physiotherapy for his {injury} on Thursdays at 8:00", "context", "health"
    )
    m.ask(
        "en",
        "health",
        [phys],
        "When is my physiotherapy?",
        f"When is the appointment for my sore {injury_para}?",
    )
    doc = m.add(
        "GP is Dr. Marta Lopes at USF Arco do Cego; annual check-up in April", "knowledge", "health"
    )
    m.ask("en", "health", [doc], "Who is my GP?", "Which doctor do I see for my yearly exam?")
    dent = m.add(
        "Dentist appointment on 17 December at 9:30 with Dr. Nuno Pais", "context", "health"
    )
    m.ask(
        "en", "health", [dent], "When is my dentist appointment?", "When do I get my teeth checked?"
    )
    sleep = m.add("Sleeps badly after coffee past 15:00", "behavior", "health")
    m.ask(
        "en",
        "health",
        [sleep],
        "Can I have an espresso at 16:00?",
        "Is a late-afternoon caffeine drink a bad idea for me?",
    )
    for sport, sport_para in SPORTS:
        day = rng.choice(WEEKDAYS)
        friend = rng.choice(["Pedro", "Jonas", "Samir", "the office group", "alone"])
        f = m.add(f"Does {sport} on {day}s with {friend}", "behavior", "hobbies")
        m.ask(
            "en", "hobbies", [f], f"When do I do {sport}?", f"Which day is {sport_para} on for me?"
        )


def build_hobbies(m: Memory) -> None:
    rng = m.rng
    for book, author in BOOKS:
        opinion = rng.choice(
            [
                "loved it",
                "found it slow",
                "abandoned it halfway",
                "wants to reread it",
                "recommended it to Pedro",
            ]
        )
        when = a_date(rng, past_days=700)
        f = m.add(
            f"Read {book} by {author} in {MONTHS[when.month - 1]} {when.year} and {opinion}",
            "context",
            "hobbies",
        )
        m.ask(
            "en",
            "hobbies",
            [f],
            f"Did I read {book}?",
            f"What did I think of the {author.split()[-1]} book?",
        )
    goals = [
        (
            "Wants to run the Lisbon half marathon in March in under 1h45",
            "What is my half marathon goal?",
            "What time am I aiming for in the spring race?",
        ),
        (
            "Plans to pass the JLPT N4 Japanese exam next July",
            "Which Japanese exam am I preparing for?",
            "What language test am I studying for?",
        ),
        (
            "Wants to read 30 books this year",
            "How many books do I want to read this year?",
            "What's my reading target?",
        ),
        (
            "Wants to ship Sprout to the App Store before Mia's birthday",
            "When do I want to release Sprout?",
            "What's the deadline for the kids' reading app?",
        ),
        (
            "Saving for a bigger flat in Campo de Ourique by 2028",
            "Where do we want to buy a flat?",
            "Which neighbourhood are we house-hunting in?",
        ),
        (
            "Wants to give a talk at PyCon Portugal about PostgreSQL full-text search",
            "What talk do I want to give at PyCon?",
            "Which conference presentation am I planning?",
        ),
    ]
    for content, lex, para in goals:
        f = m.add(content, "goal", "goals")
        m.ask("en", "goals", [f], lex, para)
    photo = m.add(
        "Shoots film on a Pentax MX and develops black-and-white at home", "context", "hobbies"
    )
    m.ask(
        "en", "hobbies", [photo], "Which camera do I use?", "What's my analogue photography setup?"
    )
    chess = m.add(
        "Plays chess on Lichess as danielc_lx, rated about 1850 in rapid", "context", "hobbies"
    )
    m.ask("en", "hobbies", [chess], "What's my Lichess rating?", "How good am I at chess online?")


def build_schedule(m: Memory, colleagues: list[str]) -> None:
    rng = m.rng
    used: set[tuple[str, str]] = set()
    for meeting, meeting_para in MEETINGS:
        who = rng.choice(colleagues)
        day = rng.choice(WEEKDAYS[:5])
        hour = rng.choice(["9:00", "10:30", "11:00", "14:00", "15:30", "16:00"])
        while (day, hour) in used:
            hour = rng.choice(["9:30", "12:00", "13:30", "17:00"])
        used.add((day, hour))
        f = m.add(
            f"Has a standing {meeting} with {who} every {day} at {hour}", "context", "schedule"
        )
        m.ask(
            "en",
            "schedule",
            [f],
            f"When is my {meeting} with {who}?",
            f"When do {who.split()[0]} and I have our {meeting_para}?",
        )
    rules = [
        (
            "Does not take calls before 9:30 or after 18:30 Lisbon time",
            "Book a call with the Toronto team at 20:00",
            "Is a late evening meeting OK for me?",
        ),
        (
            "Blocks Wednesday mornings for deep work, no meetings",
            "Can I put a meeting on Wednesday at 10:00?",
            "When is my focus time?",
        ),
        (
            "On-call for Platform every fourth week; next rotation starts 7 December",
            "When is my next on-call week?",
            "When do I carry the pager again?",
        ),
        (
            "Quarterly performance reviews are due on 15 January",
            "When are performance reviews due?",
            "What's the deadline for writing my reports' evaluations?",
        ),
        (
            "Works from the office on Tuesdays and Thursdays",
            "Which days am I in the office?",
            "When do I commute to work?",
        ),
    ]
    for content, lex, para in rules:
        f = m.add(content, "behavior", "schedule")
        m.ask("en", "schedule", [f], lex, para)


def build_habits(m: Memory) -> None:
    habits = [
        (
            "Asks for a one-paragraph summary before the details",
            "Explain the new design to me",
            "How do I like long explanations structured?",
        ),
        (
            "Writes commit messages in the imperative mood with a ticket id prefix",
            "Write a commit message for this change",
            "How should the description of my change be phrased?",
        ),
        (
            "Prefers British spelling in documents",
            "Proofread my design document",
            "Which English variant do I write in?",
        ),
        (
            "Dislikes emojis in work messages",
            "Draft a Slack announcement for the release",
            "Write a cheerful note to the team about the launch",
        ),
        (
            "Reviews pull requests first thing in the morning",
            "When do I review pull requests?",
            "What do I do at the start of my workday?",
        ),
        (
            "Keeps a weekly log in Obsidian every Friday afternoon",
            "When do I write my weekly log?",
            "When do I journal about work?",
        ),
        (
            "Likes SQL examples for PostgreSQL, not MySQL",
            "Show me an upsert example",
            "How do I insert-or-update a row?",
        ),
        (
            "Wants cost estimates in euros, not dollars",
            "Estimate the monthly cloud bill",
            "How much will the servers cost us each month?",
        ),
    ]
    for content, lex, para in habits:
        f = m.add(content, "behavior", "habits")
        m.ask("en", "habits", [f], lex, para)


def build_log(m: Memory, colleagues: list[str], target: int, rng: random.Random) -> None:
    """Dated events until the memory holds ``target`` facts (English part)."""
    people = [n for n, _ in FAMILY.values()] + ["Pedro", "Yu's parents", "the kids"]

    def fixed() -> tuple[str, str, str, str | None]:
        p, desc, _ = rng.choice(PROJECTS)
        bug = rng.choice(BUGS)
        d = a_date(rng)
        return (
            f"Fixed a {bug} in {p} on {day_month_year(d)}",
            "context",
            "projects",
            f"When did I fix the {bug} in {p}?",
        )

    def met() -> tuple[str, str, str, str | None]:
        c = rng.choice(colleagues)
        city = rng.choice(CITIES)[0]
        topic = rng.choice(TOPICS)[0]
        d = a_date(rng)
        return (
            f"Met {c} in {city} on {day_month_year(d)} to discuss {topic}",
            "context",
            "work",
            f"When did I meet {c} about {topic}?",
        )

    def bought() -> tuple[str, str, str, str | None]:
        item, shop = rng.choice(ITEMS)
        d = a_date(rng)
        return (
            f"Bought {item} from {shop} in {MONTHS[d.month - 1]} {d.year}",
            "context",
            "shopping",
            f"Where did I buy {item}?",
        )

    def cooked() -> tuple[str, str, str, str | None]:
        dish = rng.choice(DISHES)
        who = rng.choice(people)
        d = a_date(rng)
        return (
            f"Cooked {dish} for {who} on {day_month_year(d)}",
            "context",
            "food",
            f"When did I cook {dish} for {who}?",
        )

    def ran() -> tuple[str, str, str, str | None]:
        km = rng.randint(5, 25)
        route = rng.choice(ROUTES)
        d = a_date(rng)
        return (f"Ran {km} km along {route} on {day_month_year(d)}", "context", "hobbies", None)

    def paired() -> tuple[str, str, str, str | None]:
        c = rng.choice(colleagues)
        p = rng.choice(PROJECTS)[0]
        topic = rng.choice(TOPICS)[0]
        d = a_date(rng)
        return (
            f"Paired with {c} on {p} {topic} work on {day_month_year(d)}",
            "context",
            "work",
            None,
        )

    def reviewed() -> tuple[str, str, str, str | None]:
        c = rng.choice(colleagues)
        p = rng.choice(PROJECTS)[0]
        bug = rng.choice(BUGS)
        d = a_date(rng)
        return (
            f"Reviewed {c}'s pull request fixing a {bug} in {p} on {day_month_year(d)}",
            "context",
            "work",
            None,
        )

    def called() -> tuple[str, str, str, str | None]:
        vendor = rng.choice(
            [
                "Datadog",
                "AWS support",
                "Stripe",
                "Twilio",
                "Cloudflare",
                "the accountant",
                "the landlord",
                "the bank",
                "the insurer",
            ]
        )
        topic = rng.choice(
            [
                "the renewal",
                "a billing question",
                "an outage report",
                "the contract",
                "a refund",
                "the new pricing",
            ]
        )
        d = a_date(rng)
        return (
            f"Had a call with {vendor} about {topic} on {day_month_year(d)}",
            "context",
            "admin",
            f"When did I talk to {vendor} about {topic}?",
        )

    def watched() -> tuple[str, str, str, str | None]:
        film = rng.choice(
            [
                "Perfect Days",
                "Spirited Away",
                "Past Lives",
                "Dune Part Two",
                "Oppenheimer",
                "The Zone of Interest",
                "Anatomy of a Fall",
                "In the Mood for Love",
                "Paddington 2",
                "Inside Out 2",
            ]
        )
        who = rng.choice(people)
        d = a_date(rng)
        return (f"Watched {film} with {who} on {day_month_year(d)}", "context", "hobbies", None)

    makers: list[Callable[[], tuple[str, str, str, str | None]]] = [
        fixed,
        met,
        bought,
        cooked,
        ran,
        paired,
        reviewed,
        called,
        watched,
    ]
    asked: dict[str, list[tuple[str | None, str]]] = {}
    while len(m.facts) < target:
        content, category, topic, question = rng.choice(makers)()
        f = m.add(content, category, topic)
        if question:
            asked.setdefault(question, []).append((f, topic))
    # a question two events answer alike ("when did I cook risotto for Pedro?") is not asked
    for question, answers in asked.items():
        if len(answers) == 1 and rng.random() < 0.15:
            m.ask("en", answers[0][1], [answers[0][0]], question)


def build_cjk(m: Memory, target: int) -> None:
    rng = m.rng
    # the in-laws, in Chinese
    for rel, name in ZH_INLAWS:
        para = ZH_INLAW_PARA[rel]
        city = rng.choice(ZH_CITIES[:4])
        act = rng.choice(ZH_ACTIVITIES)
        food = rng.choice(ZH_FOODS)
        born = a_date(rng, past_days=365)
        when = "退休后" if rel in ("岳父", "岳母") else "周末"
        live = m.add(f"{rel}{name}住在{city}，{when}喜欢{act}", "knowledge", "family", "zh")
        eat = m.add(f"{rel}{name}最爱吃{food}，不能吃太辣", "knowledge", "family", "zh")
        bd = m.add(f"{rel}{name}的生日是{born.month}月{born.day}日", "knowledge", "family", "zh")
        m.ask("zh", "family", [live], f"{rel}{name}住在哪里？", f"{para}现在在哪个城市生活？")
        m.ask("zh", "family", [eat], f"{rel}{name}喜欢吃什么？", f"请{para}吃饭点什么菜好？")
        m.ask("zh", "family", [bd], f"{rel}{name}的生日是哪天？", f"什么时候给{para}祝寿？")
        m.ask("zh", "family", [live, eat], f"去看{rel}{name}要准备什么？")
    # the Shenzhen office
    for name, area in ZH_COLLEAGUES:
        p = rng.choice(PROJECTS)[0]
        tea = rng.choice(ZH_TEAS)
        day = rng.randrange(5)
        r = m.add(f"深圳办公室的{name}负责{p}的{area}工作", "knowledge", "colleagues", "zh")
        t = m.add(f"{name}喜欢喝{tea}，出差时可以带一盒当礼物", "knowledge", "colleagues", "zh")
        mt = m.add(
            f"每周{ZH_WEEKDAYS[day]}上午和{name}开视频会议，讨论{p}的进度",
            "context",
            "schedule",
            "zh",
        )
        m.ask("zh", "colleagues", [r], f"{p}的{area}工作是谁负责的？", f"深圳那边谁管{p}这一块？")
        m.ask("zh", "colleagues", [t], f"{name}喜欢喝什么茶？", f"给{name}带什么礼物好？")
        m.ask(
            "zh",
            "schedule",
            [mt],
            f"和{name}的视频会议是星期几？",
            f"我什么时候跟{name}对{p}的进展？",
        )
    # habits and preferences in Chinese
    zh_prefs = [
        (
            "回答问题时先给结论，再解释原因",
            "你回答我的问题时应该怎么组织？",
            "我喜欢什么样的答复结构？",
        ),
        ("喜欢用拼音输入法，不用五笔", "我用什么中文输入法？", "我打汉字用哪种方式？"),
        ("周末早上带孩子去中文学校上课", "周末早上要做什么？", "星期六上午孩子们去哪里？"),
        ("在学做川菜，最近练习宫保鸡丁", "我最近在学做什么菜？", "我在练习哪道四川菜？"),
        (
            "女儿米娅每天晚上跟外婆视频说中文",
            "米娅每天晚上和谁视频？",
            "闺女晚上跟谁打电话练中文？",
        ),
        (
            "家里的路由器密码记在1Password的家庭保险库里",
            "路由器密码在哪里？",
            "家里网络的密码存在哪？",
        ),
        ("喜欢看刘慈欣的科幻小说", "我喜欢看谁的小说？", "我爱读哪位作家的科幻作品？"),
        (
            "每年春节前给岳父母寄葡萄牙红酒",
            "春节前要寄什么？",
            "过年给老丈人老丈母娘准备什么礼物？",
        ),
        (
            "儿子托马斯怕黑，睡觉时要开小夜灯",
            "托马斯睡觉要注意什么？",
            "我家小子晚上睡不着怎么办？",
        ),
        ("妻子余对芒果过敏，点甜品时要避开", "余对什么过敏？", "给老婆买甜点要注意什么？"),
        (
            "在深圳出差时习惯住南山区的酒店，离办公室近",
            "去深圳出差住哪里？",
            "到了那边的分公司，我一般在哪儿过夜？",
        ),
        (
            "中文写作时喜欢用简体字，不用繁体",
            "我写中文用简体还是繁体？",
            "我平时写汉字用哪种字形？",
        ),
        ("每天早上七点遛狗Pixel，沿着河边走半小时", "什么时候遛狗？", "我家那只边牧每天几点出门？"),
        (
            "学中文的老师是线上的孙老师，每周二晚上上课",
            "中文课是星期几？",
            "普通话辅导安排在哪天？",
        ),
        ("微信号是daniel_lx，工作群里用真名", "我的微信号是什么？", "国内同事怎么加我好友？"),
        ("喜欢在成都的人民公园喝盖碗茶", "在成都喜欢去哪里喝茶？", "到了蓉城我爱在哪儿品茗？"),
    ]
    for content, lex, para in zh_prefs:
        f = m.add(content, "preference", "habits", "zh")
        m.ask("zh", "habits", [f], lex, para)
    # Japanese: learning, the Osaka partner, trips
    for name, area in JA_COLLEAGUES:
        place = rng.choice(JA_PLACES[:4])
        food = rng.choice(JA_FOODS)
        r = m.add(
            f"大阪のパートナー企業の{name}さんは{area}の担当", "knowledge", "colleagues", "ja"
        )
        e = m.add(f"{name}さんと{place}で{food}を食べたのが楽しかった", "context", "travel", "ja")
        m.ask(
            "ja",
            "colleagues",
            [r],
            f"{name}さんの担当は何ですか？",
            f"パートナー側で{area}を見ているのは誰？",
        )
        m.ask(
            "ja",
            "travel",
            [e],
            f"{name}さんと{place}で何を食べましたか？",
            f"{name}さんとの食事はどこでしたっけ？",
        )
    ja_facts = [
        (
            "日本語のレッスンは毎週水曜日の夜、オンラインで山本先生と",
            "日本語のレッスンはいつですか？",
            "語学の授業は何曜日？",
        ),
        (
            "京都では旅館よりビジネスホテルの方が好き",
            "京都でどんな宿に泊まりたい？",
            "京都の泊まる所の好みは？",
        ),
        (
            "漢字の復習にAnkiを毎朝15分使っている",
            "漢字の勉強に何を使っている？",
            "毎朝の暗記アプリは何？",
        ),
        ("来年の春に家族で東京と箱根に行く予定", "来年の春の旅行はどこ？", "家族旅行の行き先は？"),
        (
            "大阪出張では梅田のホテルに泊まることが多い",
            "大阪出張ではどこに泊まる？",
            "関西への仕事の旅で宿はどの辺？",
        ),
        (
            "納豆は苦手だが、味噌汁は毎日でも飲める",
            "納豆は好き？",
            "和食の朝ごはんで避けたいものは？",
        ),
        (
            "日本語の日記を毎晩三行だけ書いている",
            "日本語の日記はいつ書いている？",
            "寝る前の語学の習慣は？",
        ),
        (
            "田中さんへのお土産にはポルトガルのワインが喜ばれた",
            "田中さんにどんなお土産が喜ばれた？",
            "物流担当の方への手土産は何がいい？",
        ),
    ]
    for content, lex, para in ja_facts:
        f = m.add(content, "context", "hobbies", "ja")
        m.ask("ja", "hobbies", [f], lex, para)
    # the dated log, in Chinese and Japanese
    people = ["岳父", "岳母", "米娅", "托马斯", "余", "陈浩"]
    asked: dict[str, list[tuple[str | None, str]]] = {}
    while len(m.facts) < target:
        d = a_date(rng)
        pick = rng.random()
        if pick < 0.4:
            who, city, food = rng.choice(people), rng.choice(ZH_CITIES), rng.choice(ZH_FOODS)
            f = m.add(
                f"{d.year}年{d.month}月{d.day}日和{who}在{city}吃了{food}", "context", "food", "zh"
            )
            asked.setdefault(f"什么时候和{who}在{city}吃的{food}？", []).append((f, "food"))
        elif pick < 0.7:
            name, _ = rng.choice(ZH_COLLEAGUES)
            p = rng.choice(PROJECTS)[0]
            bug = rng.choice(["性能问题", "内存泄漏", "时区错误", "死锁", "缓存失效", "接口超时"])
            f = m.add(
                f"{d.year}年{d.month}月{d.day}日和{name}一起排查了{p}的{bug}",
                "context",
                "work",
                "zh",
            )
            asked.setdefault(f"我和{name}什么时候查的{p}的{bug}？", []).append((f, "work"))
        else:
            place, food = rng.choice(JA_PLACES), rng.choice(JA_FOODS)
            f = m.add(
                f"{d.year}年{d.month}月{d.day}日に{place}で{food}を食べた",
                "context",
                "travel",
                "ja",
            )
            asked.setdefault(f"{place}で{food}を食べたのはいつ？", []).append((f, "travel"))
    for question, answers in asked.items():
        if len(answers) == 1 and rng.random() < 0.3:
            lang = "ja" if question.endswith("いつ？") else "zh"
            m.ask(lang, answers[0][1], [answers[0][0]], question)


def assign_stamps(facts: list[dict], rng: random.Random) -> None:
    """Confidence and creation time, drawn alike for every fact (evidence or not)."""
    for fact in facts:
        # skewed towards high confidence, as an updater's facts are
        fact["confidence"] = round(0.7 + 0.3 * rng.betavariate(2.0, 1.3), 2)
        fact["created_at"] = (NOW - timedelta(minutes=rng.randint(0, 900 * 24 * 60))).isoformat()


def choose_questions(m: Memory, rng: random.Random) -> list[Question]:
    """:data:`N_QUESTIONS` questions: a CJK share, a paraphrased share, and of each about 60 %
    answered by one fact, 30 % by two, 10 % by three."""
    n_cjk = round(N_QUESTIONS * CJK_SHARE)
    chosen: list[Question] = []
    seen: set[str] = set()
    for langs, count in ((("zh", "ja"), n_cjk), (("en",), N_QUESTIONS - n_cjk)):
        pool = [(lang, c) for lang in langs for c in m.questions.by_lang[lang]]
        rng.shuffle(pool)
        by_size: dict[int, list] = {1: [], 2: [], 3: []}
        for item in pool:
            by_size[min(len(item[1][2]), 3)].append(item)
        for size, items in by_size.items():
            # topics taking turns, so that the many colleague questions do not crowd the rest;
            # questions with a paraphrase first within a topic
            turn: dict[str, int] = {}
            keyed = []
            for item in sorted(items, key=lambda item: item[1][1] is None):
                topic = item[1][3]
                turn[topic] = turn.get(topic, 0) + 1
                keyed.append((turn[topic], item))
            by_size[size] = [item for _, item in sorted(keyed, key=lambda k: k[0])]
        quota = {3: round(count * 0.1), 2: round(count * 0.3)}
        quota = {k: min(v, len(by_size[k])) for k, v in quota.items()}
        quota[1] = count - quota[2] - quota[3]
        want_para = round(count * PARAPHRASED_SHARE)
        picked = [item for size in (1, 2, 3) for item in by_size[size][: quota[size]]]
        rng.shuffle(picked)
        n_para = 0
        for lang, (lexical, para, evidence, topic) in picked:
            use_para = para is not None and n_para < want_para and rng.random() < 0.7
            text = para if use_para and para else lexical
            if text in seen:
                text = lexical
                use_para = False
            seen.add(text)
            chosen.append(
                Question(text, evidence, "paraphrased" if use_para else "lexical", lang, topic)
            )
            n_para += use_para
    return chosen


def generate(seed: int = SEED) -> dict:
    rng = random.Random(seed)
    m = Memory(rng)
    colleagues = build_colleagues(m)
    build_projects(m, colleagues)
    build_family(m)
    build_tools(m)
    build_travel(m)
    build_food(m)
    build_health(m)
    build_hobbies(m)
    build_schedule(m, colleagues)
    build_habits(m)
    n_cjk = round(N_FACTS * CJK_SHARE)
    build_log(m, colleagues, N_FACTS - n_cjk, rng)
    build_cjk(m, N_FACTS)
    rng.shuffle(m.facts)
    assign_stamps(m.facts, rng)
    questions = choose_questions(m, rng)
    rng.shuffle(questions)  # a prefix of the file is a sample of it
    ids = {f["id"] for f in m.facts}
    for q in questions:
        assert set(q.evidence) <= ids
    return {
        "description": (
            "The long-lived memory of one user (facts) and questions with the ids of the facts"
            " that answer them; generated by make_dataset.py (seed"
            f" {seed}), do not edit by hand."
        ),
        "seed": seed,
        "now": NOW.isoformat(),
        "user": {
            "work_context": "Staff engineer at Freightly, a logistics company in Lisbon; leads"
            " the Platform team's migration to PostgreSQL and mentors the Routing team.",
            "personal_context": "Lives in Lisbon with his wife Chen Yu and their two children;"
            " speaks Portuguese, English and some Mandarin, learning Japanese.",
            "top_of_mind": "Preparing the Chengdu family trip and the Kestrel database move.",
        },
        "history": {
            "recent_months": "Moved Ledger to a new billing provider; ran the Lisbon 10k.",
            "long_term_background": "Studied computer science in Porto, worked in Berlin for"
            " five years before Freightly.",
        },
        "facts": m.facts,
        "questions": [
            {
                "id": f"q{i:03d}",
                "text": q.text,
                "evidence": q.evidence,
                "kind": q.kind,
                "lang": q.lang,
                "topic": q.topic,
            }
            for i, q in enumerate(questions)
        ],
    }


def extra_facts(n: int, existing: set[str], seed: int = SEED + 1) -> list[dict]:
    """``n`` more facts of the dated log's kinds (English and CJK in the file's proportions),
    none with the content of one in ``existing`` (casefolded), with confidences and times."""
    rng = random.Random(seed)
    m = Memory(rng, prefix="xfact")
    m.keys = {" ".join(c.casefold().split()) for c in existing}
    colleagues = [f"{f} {rng.choice(LAST)}" for f in FIRST]
    build_log(m, colleagues, round(n * (1 - CJK_SHARE)), rng)
    build_cjk_log_only(m, n, rng)
    assign_stamps(m.facts, rng)
    return m.facts


def build_cjk_log_only(m: Memory, target: int, rng: random.Random) -> None:
    people = ["岳父", "岳母", "米娅", "托马斯", "余", "陈浩"]
    while len(m.facts) < target:
        d = a_date(rng)
        if rng.random() < 0.6:
            who, city, food = rng.choice(people), rng.choice(ZH_CITIES), rng.choice(ZH_FOODS)
            m.add(
                f"{d.year}年{d.month}月{d.day}日和{who}在{city}吃了{food}", "context", "food", "zh"
            )
        else:
            place, food = rng.choice(JA_PLACES), rng.choice(JA_FOODS)
            m.add(
                f"{d.year}年{d.month}月{d.day}日に{place}で{food}を食べた",
                "context",
                "travel",
                "ja",
            )


def main() -> None:
    data = generate()
    text = json.dumps(data, ensure_ascii=False, indent=0)
    OUT.write_text(text + "\n", encoding="utf-8")
    qs = data["questions"]
    print(
        f"wrote {OUT.name}: {len(data['facts'])} facts"
        f" ({sum(f['lang'] != 'en' for f in data['facts'])} CJK,"
        f" {sum(f['category'] == 'correction' for f in data['facts'])} corrections),"
        f" {len(qs)} questions ({sum(q['kind'] == 'paraphrased' for q in qs)} paraphrased,"
        f" {sum(q['lang'] != 'en' for q in qs)} CJK,"
        f" {sum(len(q['evidence']) > 1 for q in qs)} with several answering facts),"
        f" {len(text.encode()) / 1e6:.2f} MB"
    )


if __name__ == "__main__":
    main()
