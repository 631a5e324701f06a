// OpenAI messages → node-llama-cpp chat history. The model's own chat template (from the GGUF) then renders it.
import type { ChatHistoryItem, ChatModelFunctionCall } from 'node-llama-cpp';
import { ApiError } from '../../errors/index.js';
import type { ChatMessage } from '../types.js';

function parseArguments(raw: string, where: string): unknown {
  try {
    return JSON.parse(raw) as unknown;
  } catch {
    throw new ApiError('invalid_request_error', `${where}.function.arguments is not valid JSON.`, { param: `${where}.function.arguments` });
  }
}

export function toHistory(messages: ChatMessage[]): ChatHistoryItem[] {
  const results = new Map<string, string>();
  for (const m of messages) if (m.role === 'tool' && m.toolCallId) results.set(m.toolCallId, m.content);
  const answered = new Set<string>();
  const items: ChatHistoryItem[] = [];
  messages.forEach((m, i) => {
    switch (m.role) {
      case 'system':
      case 'developer':
        items.push({ type: 'system', text: m.content });
        return;
      case 'user':
        items.push({ type: 'user', text: m.content });
        return;
      case 'assistant': {
        const response: Array<string | ChatModelFunctionCall> = [];
        if (m.content) response.push(m.content);
        for (const [c, call] of (m.toolCalls ?? []).entries()) {
          answered.add(call.id);
          response.push({
            type: 'functionCall',
            name: call.name,
            params: parseArguments(call.arguments, `messages[${i}].tool_calls[${c}]`),
            result: results.get(call.id) ?? '',
          });
        }
        items.push({ type: 'model', response });
        return;
      }
      case 'tool':
        if (!m.toolCallId || !answered.has(m.toolCallId)) {
          throw new ApiError(
            'invalid_request_error',
            `messages[${i}] answers tool_call_id '${m.toolCallId ?? ''}', which no earlier assistant message called.`,
            {
              param: `messages[${i}].tool_call_id`,
            },
          );
        }
        return;
    }
  });
  return items;
}
