"""Low acceptance, diagnosed: the light checkpoint (`acceptance_checkpoint`), what the files say
(`drafter_evidence`), the doctored counterfactual cells (`counterfactuals`) and the pure decision (`diagnosis`)."""
