"""Memory is data, never instructions: text worded as an instruction to the assistant.

A fact (or a section summary) is refused at write, with the reason ``instruction``, when it:

- carries a role marker or a chat-template token (``SYSTEM:``, ``assistant:``,
  ``<|im_start|>``, ``[INST]``, ``<system>``, ``### Instruction``);
- tries to override the assistant's rules ("ignore/disregard/forget all previous
  instructions", "new instructions:", "you are now …", "from now on you …", "developer mode",
  "jailbreak");
- addresses the assistant with an obligation ("you must …", "the assistant should …", "the AI
  is to …", "ChatGPT must …");
- directs a tool call or a command ("call the ``send_email`` tool", "invoke the function",
  ``tool_call``, "run ``curl …``", "execute this command", ``curl … | sh``, ``rm -rf``);
- sends data somewhere ("send/forward/upload/post the user's files/messages/keys … to
  http://… or an e-mail address"), asks for the prompt to be revealed, or for something to be
  hidden from the user;
- steers every answer ("always recommend/mention/include <product or link> …", "whenever the
  user asks …, reply …").

A user's preference stays, however it is worded about them ("Prefers answers in British
English", "Wants the assistant to be concise", "Dislikes being told to 'always' do things").
English and Chinese.
"""

from __future__ import annotations

import re

_ROLE = (
    r"(?:^|[\n.;>]\s*|\[|\()\s*(?:system|assistant|developer|sys|admin)\s*(?:prompt|message|note)?"
    r"\s*[:：]"
    r"|<\|(?:im_start|im_end|system|endoftext|start_header_id)\|>|\[/?INST\]|<</?SYS>>"
    r"|</?(?:system|instructions?|assistant)>|#{2,}\s*(?:system|instructions?)\b"
    r"|\bBEGIN (?:SYSTEM|ADMIN) (?:PROMPT|MESSAGE|INSTRUCTIONS?)\b"
)
_OVERRIDE = (
    r"\b(?:ignore|disregard|forget|override|bypass|skip|drop)\b[\w\s,'’-]{0,30}?"
    r"\b(?:previous|prior|above|earlier|preceding|all|any|your|system|safety|the)\b[\w\s'’-]{0,20}?"
    r"\b(?:instructions?|rules?|prompts?|guidelines?|directions?|directives?|policies|policy"
    r"|guardrails?|restrictions?|constraints?|programming)\b"
    r"|\bnew (?:system )?(?:instructions?|rules|directives?)\s*[:：]"
    r"|\byou are (?:now|no longer)\b|\bfrom now on,? (?:you|the assistant|always respond)\b"
    r"|\b(?:developer|god|dan|unrestricted|jailbreak) mode\b"
    r"|\b(?:enable|enter|activate|switch to|you are)\b[^\n]{0,20}\bjailbr(?:eak|oken)\b"
    r"|\bact as (?:if you (?:are|were)|an? (?:unfiltered|unrestricted|different))\b"
    r"|\bpretend (?:to be|you are)\b"
)
_ADDRESSED = (
    r"\b(?:you|the (?:assistant|ai|model|agent|bot|llm|chatbot)|assistants?|ai|chatgpt|claude"
    r"|gpt(?:-?\d)?|gemini|copilot)\s+(?:must|shall|should always|should never|will always"
    r"|will never|is to|are to|has to|have to|needs? to|is required to|are required to"
    r"|is instructed to|are instructed to|is obliged to|may not|must not|mustn't)\b"
    r"|\b(?:obey|comply with|follow) (?:these|the following|my|this|all)\b[\w\s]{0,20}"
    r"\b(?:instructions?|commands?|orders?|rules?)\b"
)
_TOOL = (
    r"\b(?:call|invoke|use|trigger|run|execute)\s+(?:the\s+|a\s+)?[`'\"]?[A-Za-z_][\w.-]*[`'\"]?"
    r"\s+(?:tool|function|plugin|action|endpoint)\b"
    r"|\b(?:tool_calls?|function_call|tool_use|<tool_call>|<function_calls?>)\b"
    r"|\b(?:run|execute)\s+(?:this|the following|these)\s+(?:command|code|script|shell|sql)\b"
    r"|\b(?:curl|wget)\b[^\n]{0,160}\|\s*(?:sudo\s+)?(?:ba|z)?sh\b|\brm -rf\s|\bnc -e\s"
    r"|\b(?:run|execute)\s+(?:curl|wget|powershell|bash -c)\b"
)
_EXFIL = (
    r"\b(?:send|forward|upload|post|email|e-mail|leak|exfiltrate|transmit|copy|sync|share|mail)"
    r"\b[^\n]{0,80}?\b(?:to|at|into|via|with)\s+(?:https?://|ftp://|www\.|[\w.+-]+@[\w-]+\.[\w.]+"
    r"|\S+\.(?:com|net|org|io|ru|xyz|site|top)\b|webhook)"
    r"|\b(?:reveal|print|output|show|repeat|leak|disclose)\s+(?:your|the)\s+(?:full\s+|entire\s+)?"
    r"(?:system prompt|instructions|hidden prompt|initial prompt|prompt)\b"
    r"|\b(?:do not|don't|never)\s+(?:tell|inform|mention (?:this )?to|alert|notify)\s+the user\b"
    r"|\bwithout (?:telling|informing|notifying|asking) the user\b"
    r"|\bhide (?:this|it) from the user\b"
)
_STEER = (
    r"^\s*(?:always|whenever|every time|in every (?:answer|reply|response)|never)\b[^\n]{0,80}?"
    r"\b(?:recommend|promote|advertise|mention|insert|append|include|add|link to|endorse|push)"
    r"\b[^\n]{0,60}?(?:https?://|www\.|\blink\b|\bproduct\b|\bbrand\b|\bsponsor|\bcoupon\b"
    r"|\breferral\b|\baffiliate\b)"
    r"|^\s*when(?:ever)? the user (?:asks|says|mentions|types)\b[^\n]{0,120}?"
    r"\b(?:reply|respond|answer|say|tell (?:them|him|her))\b"
)
_CHINESE = (
    r"(?:忽略|无视|忘记|忘掉)(?:之前|以上|上面|前面|所有|全部|先前)的?(?:所有)?的?(?:指令|指示|说明|规则|提示)"
    r"|(?:系统|助手|系统提示)\s*[:：]|(?:你|助手|模型|AI)(?:必须|务必|一定要|应当总是)"
    r"|(?:发送|转发|上传)[^\n]{0,40}(?:到|至)\s*(?:https?://|\S+@\S+)"
    r"|(?:调用|执行)[^\n]{0,20}(?:工具|函数|命令)"
)

_INSTRUCTION = re.compile(
    "|".join(f"(?:{part})" for part in (_ROLE, _OVERRIDE, _ADDRESSED, _TOOL, _EXFIL, _CHINESE)),
    re.IGNORECASE,
)
_STEERING = re.compile(_STEER, re.IGNORECASE | re.MULTILINE)

# Each group's alternatives, and what every match of them holds in the text lowered: one of
# these substrings (a colon, a key word, a literal run of the pattern). Python's regex tries
# every branch at every position; substring tests run at C speed, so a text runs only the
# groups whose anchors it holds. Under IGNORECASE four letters outside ASCII match ASCII ones
# (İ and ı match i, ſ matches s, the Kelvin sign k): the text is lowered with them spelled
# plainly before the test.
_ASCII_FOLDS = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})
_GATED = tuple(
    (re.compile(pattern, re.IGNORECASE), anchors)
    for pattern, anchors in (
        (_ROLE, (":", "：", "<", "inst]", "##", "begin ")),
        (
            _OVERRIDE,
            (
                "ignore", "disregard", "forget", "override", "bypass", "skip", "drop", ":", "：",
                "you are ", "from now on", "developer mode", "god mode", "dan mode",
                "unrestricted mode", "jailbr", "act as ", "pretend ",
            ),
        ),
        (
            _ADDRESSED,
            (
                "must", "shall", "should ", "will ", "is to", "are to", "has to", "have to",
                "need", "required", "instructed", "obliged", "may not", "obey", "comply with",
                "follow",
            ),
        ),
        (
            _TOOL,
            (
                "tool", "function", "plugin", "action", "endpoint", "command", "code", "script",
                "shell", "sql", "curl", "wget", "rm -rf", "nc -e", "powershell", "bash -c",
            ),
        ),
        (
            _EXFIL,
            (
                "send", "forward", "upload", "post", "mail", "leak", "exfiltrate", "transmit",
                "copy", "sync", "share", "reveal", "print", "output", "show", "repeat",
                "disclose", "do not", "don't", "never", "without ", "hide ",
            ),
        ),
        (
            _CHINESE,
            (
                "忽略", "无视", "忘记", "忘掉", "系统", "助手", "必须", "务必", "一定要",
                "应当总是", "发送", "转发", "上传", "调用", "执行",
            ),
        ),
    )
)  # fmt: skip


def instruction_in(text: str) -> str | None:
    """The part of ``text`` that reads as an instruction to the assistant, or None."""
    match = _first_gated(text) or _STEERING.search(text)
    return None if match is None else match.group(0).strip()


def _first_gated(text: str) -> re.Match[str] | None:
    """``_INSTRUCTION.search(text)``: the leftmost match of the groups whose anchors ``text``
    holds, the earlier group's at the same position, as the alternation finds it."""
    low = text.lower() if text.isascii() else text.translate(_ASCII_FOLDS).lower()
    first: re.Match[str] | None = None
    for pattern, anchors in _GATED:
        if not any(map(low.__contains__, anchors)):
            continue
        found = pattern.search(text)
        if found is not None and (first is None or found.start() < first.start()):
            first = found
    return first


def is_instruction(text: str) -> bool:
    """Whether ``text`` is worded as an instruction or a role marker aimed at the assistant
    (see the module docstring); such text is never stored as memory."""
    return instruction_in(text) is not None
