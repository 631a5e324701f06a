// Check digits: Luhn (payment cards; Saudi national ID and Iqama numbers use the same scheme over all ten digits)
// and ISO 7064 mod 97-10 (IBAN).

/** Luhn over a string of ASCII digits (or its digits from `from` to `to`): true when the last digit checks the others. */
export function luhnValid(digits: string, from = 0, to = digits.length): boolean {
  let sum = 0;
  let double = false;
  for (let i = to - 1; i >= from; i--) {
    let d = digits.charCodeAt(i) - 48;
    if (double) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    double = !double;
  }
  return sum % 10 === 0;
}

/** ISO 13616: move the first four characters to the end, letters to 10..35, and the number mod 97 must be 1. */
export function ibanValid(iban: string): boolean {
  const rearranged = iban.slice(4) + iban.slice(0, 4);
  let remainder = 0;
  for (let i = 0; i < rearranged.length; i++) {
    const c = rearranged.charCodeAt(i);
    if (c >= 48 && c <= 57) remainder = (remainder * 10 + (c - 48)) % 97;
    else if (c >= 65 && c <= 90) remainder = (remainder * 100 + (c - 55)) % 97;
    else return false;
  }
  return remainder === 1;
}
