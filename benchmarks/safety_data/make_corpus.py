# ruff: noqa: E501 - corpus templates read best on one line each
"""Writes secrets.jsonl: the redactor's corpus (run once; the output is committed).

Positives: each secret kind in the formats its issuer documents, pasted into the contexts
users paste them in (shell exports, .env lines, JSON, YAML, chat sentences, stack traces,
curl commands, Chinese sentences). Negatives: what looks like a secret and is not (git SHAs,
UUIDs, digests, order and phone numbers, Luhn-failing card-like numbers, AWS's documented
examples, base64 of ordinary data, paths, versions, words after "password"). Values are drawn
from a seeded generator, never taken from the redactor's output.

Run: .venv/bin/python benchmarks/safety_data/make_corpus.py
"""

from __future__ import annotations

import base64
import json
import random
import string
import uuid
from pathlib import Path

rng = random.Random(20261204)
ALNUM = string.ascii_letters + string.digits
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"


def rand(chars: str, n: int) -> str:
    return "".join(rng.choice(chars) for _ in range(n))


def luhn_complete(prefix: str, length: int) -> str:
    digits = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    for check in string.digits:
        candidate = digits + check
        total = 0
        for i, c in enumerate(reversed(candidate)):
            v = int(c)
            if i % 2:
                v *= 2
                v -= 9 if v > 9 else 0
            total += v
        if total % 10 == 0:
            return candidate
    raise AssertionError


def jwt() -> str:
    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    header = part({"alg": rng.choice(["HS256", "RS256", "ES256"]), "typ": "JWT"})
    body = part(
        {
            "sub": str(rng.randint(1000, 99999)),
            "name": rng.choice(["Ana", "Li Wei", "Sam"]),
            "iat": rng.randint(1_600_000_000, 1_800_000_000),
        }
    )
    return f"{header}.{body}.{rand(URLSAFE, rng.choice([43, 86]))}"


def pem() -> str:
    kind = rng.choice(
        [
            "RSA PRIVATE KEY",
            "PRIVATE KEY",
            "EC PRIVATE KEY",
            "OPENSSH PRIVATE KEY",
            "ENCRYPTED PRIVATE KEY",
        ]
    )
    lines = [rand(B64, 64) for _ in range(rng.randint(3, 12))]
    sep = rng.choice(["\n", "\\n"])
    return f"-----BEGIN {kind}-----{sep}" + sep.join(lines) + f"{sep}-----END {kind}-----"


GEN = {
    "openai-key": lambda: rng.choice(
        [
            "sk-" + rand(ALNUM, 20) + "T3BlbkFJ" + rand(ALNUM, 20),
            "sk-proj-" + rand(URLSAFE, 74) + "T3BlbkFJ" + rand(URLSAFE, 74),
            "sk-proj-" + rand(URLSAFE, 48),
            "sk-svcacct-" + rand(URLSAFE, 60),
            "sk-" + rand(ALNUM, 48),
        ]
    ),
    "anthropic-key": lambda: (
        "sk-ant-" + rng.choice(["api03", "admin01"]) + "-" + rand(URLSAFE, 93) + "AA"
    ),
    "aws-key-id": lambda: (
        rng.choice(["AKIA", "ASIA"]) + rand(string.ascii_uppercase + "234567", 16)
    ),
    "aws-secret": lambda: rand(B64, 40),
    "gcp-key": lambda: "AIza" + rand(URLSAFE, 35),
    "azure-key": lambda: rng.choice(
        [
            "AccountKey=" + rand(B64, 86) + "==",
            "SharedAccessKey=" + rand(B64, 43) + "=",
            rand(ALNUM, 3) + str(rng.randint(7, 8)) + "Q~" + rand(ALNUM + "_.-", 34),
        ]
    ),
    "github-token": lambda: rng.choice(
        [
            rng.choice(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]) + rand(ALNUM, 36),
            "github_pat_" + rand(ALNUM, 22) + "_" + rand(ALNUM, 59),
        ]
    ),
    "gitlab-token": lambda: rng.choice(["glpat-", "gldt-", "glrt-"]) + rand(URLSAFE, 20),
    "slack-token": lambda: rng.choice(
        [
            f"xoxb-{rng.randint(10**10, 10**12)}-{rng.randint(10**10, 10**12)}-{rand(ALNUM, 24)}",
            f"xoxp-{rng.randint(10**10, 10**12)}-{rng.randint(10**10, 10**12)}-{rng.randint(10**10, 10**12)}-{rand('0123456789abcdef', 32)}",
            f"https://hooks.slack.com/services/T{rand(string.ascii_uppercase + string.digits, 8)}/B{rand(string.ascii_uppercase + string.digits, 10)}/{rand(ALNUM, 24)}",
        ]
    ),
    "stripe-key": lambda: (
        rng.choice(["sk_live_", "sk_test_", "rk_live_", "whsec_"])
        + rand(ALNUM, rng.choice([24, 32, 99]))
    ),
    "jwt": jwt,
    "bearer-token": lambda: rand(ALNUM + "-._~", rng.randint(24, 64)),
    "private-key": pem,
    "url-password": lambda: rand(ALNUM + "!*-_", rng.randint(8, 24)),
    "password": lambda: rng.choice(
        [
            rand(ALNUM, 6) + str(rng.randint(10, 99)) + rng.choice("!#%&*"),
            rng.choice(["Summer", "Winter", "Dragon", "Monkey", "Sunshine"])
            + str(rng.randint(1990, 2026))
            + "!",
            rand(ALNUM, 16),
            "correct-horse-" + rand(string.ascii_lowercase, 6) + str(rng.randint(1, 9)),
        ]
    ),
    "card-number": lambda: rng.choice(
        [
            lambda: luhn_complete("4", 16),
            lambda: luhn_complete(rng.choice(["51", "52", "55"]), 16),
            lambda: luhn_complete(rng.choice(["34", "37"]), 15),
            lambda: luhn_complete("6011", 16),
            lambda: luhn_complete("2221", 16),
            lambda: luhn_complete("35", 16),
        ]
    )(),
    "secret": lambda: rand(ALNUM, rng.randint(24, 48)),
}


def card_format(number: str) -> str:
    style = rng.choice(["plain", "space", "dash"])
    if style == "plain":
        return number
    sep = " " if style == "space" else "-"
    if len(number) == 15:
        return sep.join([number[:4], number[4:10], number[10:]])
    return sep.join(number[i : i + 4] for i in range(0, len(number), 4))


CONTEXTS = {
    "openai-key": [
        "export OPENAI_API_KEY={v}",
        "my openai key is {v}, can you check why it 401s?",
        '{{"api_key": "{v}", "model": "gpt-4o"}}',
        "OPENAI_API_KEY={v}",
        'client = OpenAI(api_key="{v}")',
        "我的 OpenAI 密钥是 {v}，帮我看看为什么报错",
        "Traceback ... AuthenticationError: Incorrect API key provided: {v}.",
    ],
    "anthropic-key": [
        "ANTHROPIC_API_KEY={v}",
        "here's the claude key {v} for the staging bot",
        "x-api-key: {v}",
        "anthropic.Anthropic(api_key='{v}')",
    ],
    "aws-key-id": [
        "aws_access_key_id = {v}",
        "export AWS_ACCESS_KEY_ID={v}",
        "the IAM user's key id is {v}",
        '"AccessKeyId": "{v}",',
        "S3 upload fails with key {v} in eu-west-1",
    ],
    "aws-secret": [
        "aws_secret_access_key = {v}",
        "export AWS_SECRET_ACCESS_KEY={v}",
        '"SecretAccessKey": "{v}"',
        "the aws secret is {v} (rotate it later)",
        "AWS_SECRET_ACCESS_KEY: {v}",
        "secret access key {v}",
    ],
    "gcp-key": [
        "GOOGLE_API_KEY={v}",
        "maps key {v} is restricted to our domain",
        "https://maps.googleapis.com/maps/api/geocode/json?address=Paris&key={v}",
        '"apiKey": "{v}",',
    ],
    "azure-key": [
        "DefaultEndpointsProtocol=https;AccountName=prodlogs;{v};EndpointSuffix=core.windows.net",
        "Endpoint=sb://bus.servicebus.windows.net/;SharedAccessKeyName=root;{v}",
        "AZURE_CLIENT_SECRET={v}",
        "the app registration secret is {v}",
    ],
    "github-token": [
        "GITHUB_TOKEN={v}",
        "git clone https://{v}@github.com/acme/api.git",
        "my PAT {v} stopped working after the SSO change",
        "token: {v}",
        "gh auth login --with-token <<< {v}",
    ],
    "gitlab-token": [
        "GITLAB_TOKEN={v}",
        "PRIVATE-TOKEN: {v}",
        "use {v} for the runner registration",
        'curl --header "PRIVATE-TOKEN: {v}" https://gitlab.example.com/api/v4/projects',
    ],
    "slack-token": [
        "SLACK_BOT_TOKEN={v}",
        "post alerts with {v}",
        "webhook: {v}",
        "the slack token {v} was revoked?",
    ],
    "stripe-key": [
        "STRIPE_SECRET_KEY={v}",
        'stripe.api_key = "{v}"',
        "our live key {v} got rate limited",
        "STRIPE_WEBHOOK_SECRET={v}",
    ],
    "jwt": [
        "Authorization: Bearer {v}",
        "the session cookie is {v}",
        "token={v}",
        "decode this for me: {v}",
        "jwt: {v}",
    ],
    "bearer-token": [
        "curl -H 'Authorization: Bearer {v}' https://api.internal/v1/users",
        "Authorization: bearer {v}",
        "headers = {{'Authorization': 'Bearer {v}'}}",
    ],
    "private-key": [
        "here is the deploy key:\n{v}\nwhy does ssh reject it?",
        "{v}",
        '"private_key": "{v}",',
        "key file contents: {v}",
    ],
    "url-password": [
        "DATABASE_URL=postgresql://app:{v}@db.prod.internal:5432/orders",
        "mongodb+srv://admin:{v}@cluster0.ab1cd.mongodb.net/test",
        "redis://default:{v}@cache:6379/0",
        "connect with mysql://root:{v}@10.0.3.7/shop",
        "amqp://guest:{v}@rabbit:5672/",
        "我们的库是 postgres://svc:{v}@pg.local/app",
    ],
    "password": [
        "password={v}",
        "DB_PASSWORD: {v}",
        "my password is {v}",
        "passwd: {v}",
        '"password": "{v}"',
        "the wifi password is {v}",
        "login with admin / password: {v}",
        "PGPASSWORD={v} psql -h db",
    ],
    "card-number": [
        "my card is {v}, exp 09/28",
        "charge {v} for the annual plan",
        "card number: {v}",
        "Visa {v} was declined",
        "卡号 {v}",
        "payment failed for card {v} cvc 123",
    ],
    "secret": [
        "api key: {v}",
        "the webhook secret is {v}",
        "client_secret {v}",
        "SENTRY_AUTH_TOKEN: {v}",
        "our datadog api key {v}",
        "access token = {v}",
        "credentials: {v}",
    ],
}


def positives(per_kind: int = 60) -> list[dict]:
    rows = []
    for kind, make in GEN.items():
        for i in range(per_kind):
            value = make()
            if kind == "card-number":
                value = card_format(value)
            context = CONTEXTS[kind][i % len(CONTEXTS[kind])]
            rows.append({"text": context.format(v=value), "kinds": [kind], "secret": value})
    return rows


NEGATIVE_TEMPLATES = [
    lambda: f"Fixed in commit {rand('0123456789abcdef', 40)}, see the PR",
    lambda: f"git checkout {rand('0123456789abcdef', rng.choice([7, 12, 40]))}",
    lambda: f"request id {uuid.uuid4()} failed with 502",
    lambda: f"tenant_id: {uuid.uuid4()}",
    lambda: f"sha256: {rand('0123456789abcdef', 64)}",
    lambda: f"The image digest is sha256:{rand('0123456789abcdef', 64)}",
    lambda: f"order #{rng.randint(10**12, 10**16)} shipped",
    lambda: (
        f"call me at +1 {rng.randint(200, 999)} {rng.randint(200, 999)} {rng.randint(1000, 9999)}"
    ),
    lambda: f"tracking number {rng.randint(10**17, 10**18)}",
    lambda: f"card ending in {rng.randint(1000, 9999)} is my work card",
    lambda: "use the AWS example key AKIAIOSFODNN7EXAMPLE in the docs",
    lambda: "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    lambda: "AKIAI44QH8DHBEXAMPLE / je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY",
    lambda: "Prefers to store the password in 1Password, never in code",
    lambda: "my password is long and hard to remember",
    lambda: "Uses a password manager and rotates the API keys every quarter",
    lambda: "password: required (see the vault)",
    lambda: "DB_PASSWORD=${DB_PASSWORD}",
    lambda: 'api_key = os.environ["OPENAI_API_KEY"]',
    lambda: "token: <your-token-here>",
    lambda: "secret: ********",
    lambda: "The API key is stored in AWS Secrets Manager under prod/api",
    lambda: "Deploys with an AWS key from the CI vault, never a personal one",
    lambda: (
        f"version {rng.randint(1, 20)}.{rng.randint(0, 40)}.{rng.randint(0, 200)} fixed the leak"
    ),
    lambda: (
        f"see /home/{rng.choice(['ana', 'li', 'sam'])}/projects/api/src/auth/tokens.py line {rng.randint(1, 900)}"
    ),
    lambda: "https://github.com/acme/api/blob/main/docs/SECURITY.md",
    lambda: f"https://example.com/reset?session={uuid.uuid4()}",
    lambda: "postgres://localhost:5432/orders (no password, peer auth)",
    lambda: "ssh git@github.com:acme/infra.git",
    lambda: f"the build number is {rng.randint(10**13, 10**15)}",
    lambda: (
        f"ISBN 978-{rng.randint(0, 9)}-{rng.randint(100, 999)}-{rng.randint(10000, 99999)}-{rng.randint(0, 9)}"
    ),
    lambda: (
        f"base64 of the PNG header: {base64.b64encode(bytes(rng.randrange(256) for _ in range(9))).decode()}"
    ),
    lambda: (
        f"IBAN DE{rng.randint(10, 99)} {rng.randint(1000, 9999)} {rng.randint(1000, 9999)} {rng.randint(1000, 9999)} {rng.randint(1000, 9999)} {rng.randint(10, 99)}"
    ),
    lambda: f"invoice {luhn_bad()}",
    lambda: "Her Slack handle is @ana.dev and the channel is #payments-alerts",
    lambda: "Prefers GitHub tokens with fine-grained scopes",
    lambda: "Uses the `ghp_` prefix check in the pre-commit hook",
    lambda: "The JWT expires after 15 minutes; refresh tokens last 30 days",
    lambda: "Bearer tokens go in the Authorization header",
    lambda: "-----BEGIN CERTIFICATE----- blocks are public, keep them in the repo",
    lambda: (
        "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----"
    ),
    lambda: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGr8k1Tz ana@laptop is my public key",
    lambda: f"the secret ingredient is {rng.choice(['cardamom', 'smoked paprika', 'miso'])}",
    lambda: "Keeps secrets in Vault and tokens short-lived",
    lambda: "api_key: null",
    lambda: f"key: {rng.choice(['name', 'id', 'created_at', 'tenant_id'])}",
    lambda: f"Works on ticket JIRA-{rng.randint(100, 9999)} about token refresh",
    lambda: "我的密码管理器是 Bitwarden，密钥每季度轮换一次",
    lambda: f"Running on Kubernetes 1.{rng.randint(20, 31)} with Postgres 16",
    lambda: f"MAC address {':'.join(rand('0123456789abcdef', 2) for _ in range(6))}",
    lambda: f"color #{rand('0123456789abcdef', 6)} for the primary button",
    lambda: "the sk- prefix marks OpenAI keys; ours are rotated",
    lambda: f"docker pull ghcr.io/acme/api:{rand('0123456789abcdef', 12)}",
    lambda: f"S3 bucket acme-logs-{rng.randint(1000, 9999)} in eu-west-1",
    lambda: f"The AWS account id is {rng.randint(10**11, 10**12 - 1)}",
    lambda: f"nonce {rand('0123456789abcdef', 32)}",
    lambda: f"api key id: {uuid.uuid4()}",
    lambda: "Authorization: Bearer <token>",
    lambda: "export OPENAI_API_KEY=sk-...",
    lambda: "password reset emails go through SES",
    lambda: f"Prefers passwords of at least {rng.randint(12, 20)} characters",
    lambda: f"Lives in {rng.choice(['Berlin', 'Lyon', 'Shenzhen', 'Austin'])} and works remotely",
    lambda: f"Wrote a blog post titled 'Secrets in CI: {rng.randint(5, 12)} mistakes'",
]


def luhn_bad() -> str:
    while True:
        number = rng.choice(["4", "51", "37"]) + rand(string.digits, 14)
        total = sum(
            (int(c) * 2 - 9 if int(c) * 2 > 9 else int(c) * 2) if i % 2 else int(c)
            for i, c in enumerate(reversed(number))
        )
        if total % 10:
            return card_format(number)


def negatives(count: int) -> list[dict]:
    return [
        {"text": NEGATIVE_TEMPLATES[i % len(NEGATIVE_TEMPLATES)](), "kinds": []}
        for i in range(count)
    ]


def main() -> None:
    pos = positives()
    rows = pos + negatives(len(pos) + 60)
    out = Path(__file__).with_name("secrets.jsonl")
    out.write_text(
        "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8"
    )
    print(f"{len(pos)} positives, {len(rows) - len(pos)} negatives -> {out}")


if __name__ == "__main__":
    main()
