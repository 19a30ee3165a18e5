"""Stand-ins for the tests and the benchmarks: a local Gemini API (`gemini_stub`) and the
ranking's reference over Row objects (`rank_rows`). No module of the product imports this
package (tests/test_architecture.py); the tests, the benchmarks and the exams may."""
