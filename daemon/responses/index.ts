// The Responses API's records: responses kept with `store: true`, their input and output items, their expiry.
export { ResponseStore, type ResponseObject, type StoredItem } from './store.js';
