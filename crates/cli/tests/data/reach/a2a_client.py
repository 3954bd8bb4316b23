"""Reach skillbox as another agent would, with the A2A Python SDK (PyPI `a2a-sdk`, A2A 1.0).

Usage: a2a_client.py BASE_URL TOKEN SKILL_ID TEXT
Fetches the AgentCard, sends one message naming the skill, then GetTask and CancelTask on the
finished task; prints one JSON object with what came back.
"""

import asyncio
import json
import sys
import uuid

import httpx
from google.protobuf import json_format

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import CancelTaskRequest, GetTaskRequest, Message, Part, Role, SendMessageRequest


def dump(m):
    return json_format.MessageToDict(m)


async def main():
    base, token, skill_id, text = sys.argv[1:5]
    out = {}
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=600) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        out["card"] = dump(card)
        client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        msg = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
        msg.metadata.update({"skill": skill_id})
        events = []
        async for ev in client.send_message(SendMessageRequest(message=msg)):
            events.append(dump(ev))
        out["events"] = events
        task = next((e["task"] for e in events if "task" in e), None)
        if task:
            out["get"] = dump(await client.get_task(GetTaskRequest(id=task["id"])))
            try:
                await client.cancel_task(CancelTaskRequest(id=task["id"]))
                out["cancel"] = "no error"
            except Exception as e:
                out["cancel"] = {"type": type(e).__name__, "text": str(e)}
        try:
            await client.get_task(GetTaskRequest(id="no-such-task"))
            out["missing"] = "no error"
        except Exception as e:
            out["missing"] = {"type": type(e).__name__, "text": str(e)}
    print(json.dumps(out))


asyncio.run(main())
