// The conversation that asks a chat model to answer from retrieved passages: instructions in the question's
// language (a model answers in the language it is addressed in far more reliably than when only told to), the
// passages numbered so that the answer can cite them as [1], [2], and only as many passages as the model's context
// holds with room left for the answer.
import type { ChatMessage } from '../engines/index.js';
import type { Hit } from './library.js';
import { languageOf } from './text.js';

export interface AnswerPrompt {
  messages: ChatMessage[];
  language: 'ar' | 'en';
  /** How many of the hits, best first, the prompt quotes (the rest did not fit). */
  quoted: number;
}

const WORDING = {
  en: {
    system:
      'You answer questions using only the numbered passages the user gives you. After each statement, cite the ' +
      'passages it comes from by their numbers in square brackets, like [1] or [2][3]. If the passages do not ' +
      'contain the answer, say that you cannot find it in the documents. Answer in English.',
    passages: 'Passages:',
    question: 'Question:',
    source: (h: Hit) => `${h.filename ?? 'document'}, part ${h.chunk + 1}`,
  },
  ar: {
    system:
      'أجب عن الأسئلة مستعينًا فقط بالمقاطع المرقّمة التي يقدّمها لك المستخدم. بعد كل جملة اذكر رقم المقطع الذي ' +
      'استندت إليه بين قوسين مربعين مثل [1] أو [2][3]. إذا لم تتضمن المقاطع الإجابة فقل إنك لم تجدها في الوثائق. ' +
      'أجب باللغة العربية.',
    passages: 'المقاطع:',
    question: 'السؤال:',
    source: (h: Hit) => `${h.filename ?? 'وثيقة'}، الجزء ${h.chunk + 1}`,
  },
} as const;

/**
 * Every token is at least one byte of UTF-8 for the tokenizers llama.cpp runs (byte fallback), so bytes bound the
 * tokens from above: a prompt sized in bytes never overflows the context, whatever the model.
 */
const bytes = (text: string) => Buffer.byteLength(text, 'utf8');

/** Room the chat template's own markup may take around the two messages. */
const TEMPLATE_ALLOWANCE = 64;

export function answerPrompt(query: string, hits: Hit[], contextTokens: number, answerTokens: number): AnswerPrompt {
  const language = languageOf(query);
  const words = WORDING[language];
  const head = `${words.passages}\n\n`;
  const tail = `\n${words.question} ${query}`;
  let room = contextTokens - answerTokens - TEMPLATE_ALLOWANCE - bytes(words.system) - bytes(head) - bytes(tail);
  const quotes: string[] = [];
  for (const [i, hit] of hits.entries()) {
    const label = `[${i + 1}] (${words.source(hit)})\n`;
    const whole = `${label}${hit.text}\n\n`;
    if (bytes(whole) <= room) {
      quotes.push(whole);
      room -= bytes(whole);
      continue;
    }
    // The best passage is quoted even when only its beginning fits; later ones are left out instead.
    if (i === 0 && room > bytes(label) + 200) quotes.push(`${label}${cutToBytes(hit.text, room - bytes(label) - 8)}…\n\n`);
    break;
  }
  return {
    language,
    quoted: quotes.length,
    messages: [
      { role: 'system', content: words.system },
      { role: 'user', content: `${head}${quotes.join('')}${tail}` },
    ],
  };
}

function cutToBytes(text: string, limit: number): string {
  let used = 0;
  let out = '';
  for (const ch of text) {
    used += bytes(ch);
    if (used > limit) break;
    out += ch;
  }
  return out;
}
